"""A griffe extension (mkdocs.yml, mkdocstrings' `extensions`): spt's docstrings list arguments and
fields as aligned `name : text` lines, continued on indented lines; Markdown would run them into one
paragraph. Each such block becomes a Markdown list, one item per name, before rendering."""
import re

import griffe

# `name : text` or `a, b : text` at the start of a line; prose has no space before its colon
ENTRY = re.compile(r"^([A-Za-z_*][\w*]*(?:, [A-Za-z_*][\w*]*)*)\s+:\s+(.*)$")


def as_markdown_lists(text: str) -> str:
    """`name : text` blocks of a docstring (dedented) as Markdown list items; the rest unchanged.

    >>> as_markdown_lists("Fields:\\nd_model : width H\\n    of each layer.\\nn_layers : depth.\\nEnd.")
    'Fields:\\n\\n- `d_model`: width H of each layer.\\n- `n_layers`: depth.\\n\\nEnd.'
    """
    out, in_list, in_fence = [], False, False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        entry = None if in_fence else ENTRY.match(line)
        if entry:
            if not in_list and out and out[-1].strip():
                out.append("")
            out.append(f"- `{entry[1]}`: {entry[2]}")
            in_list = True
        elif in_list and line[:1].isspace() and line.strip():
            out[-1] += " " + line.strip()
        else:
            if in_list and line.strip():
                out.append("")
            in_list = False
            out.append(line)
    return "\n".join(out)


class ArgumentLists(griffe.Extension):
    def on_object(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = as_markdown_lists(obj.docstring.value)
