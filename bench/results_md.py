"""bench/RESULTS.md for the bench scripts: one way to add a measured table to it."""
import os
import re

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def append(heading, intro, block):
    """Adds `block` (a header line and a table) at the end of `heading`'s section of
    bench/RESULTS.md (before the next heading of the same or a higher level); the first time,
    `heading` and its `intro` paragraph go at the end of the file first."""
    with open(PATH, encoding="utf-8") as f:
        text = f.read()
    if heading not in text:
        text = text.rstrip("\n") + "\n\n" + heading + "\n\n" + intro.rstrip("\n") + "\n"
    start = text.index(heading) + len(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = len(text)
    for m in re.finditer(r"^(#+) ", text[start:], flags=re.M):
        if len(m.group(1)) <= level:
            end = start + m.start()
            break
    section = text[:end].rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"
    rest = text[end:]
    text = section + ("\n" + rest if rest else "")
    with open(PATH, "w", encoding="utf-8") as f:
        f.write(text)
