"""The commands that run studies by name: ``spt study list | run | batch | plan | check`` and
``spt tune`` (:mod:`spt.studies.cli` parses their arguments).

They sit above every study and find one through :mod:`spt.studies.registry`:

- :mod:`.notebooks`: the study notebooks, listed and copied;
- :mod:`.parameters`, :mod:`.run_parameters`: a notebook's parameters, checked before a kernel
  starts, and the parameters cell each study notebook holds;
- :mod:`.runner`, :mod:`.output`, :mod:`.slurm`: a notebook run with papermill, a batch of them,
  the same batch as SLURM jobs;
- :mod:`.plan`, :mod:`.check`, :mod:`.tune`: every stage sized before anything trains, every cell
  dry-run at its real shapes with its cost, every model's implementation paths measured ahead.
"""
