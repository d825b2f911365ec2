"""bench/RESULTS.md for the bench scripts: one way to add a measured table to it."""
import os

PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")


def append(heading, intro, block):
    """Appends `block` (a header line and a table) at the end of bench/RESULTS.md; the first
    time, `heading` and its `intro` paragraph go before it."""
    with open(PATH, encoding="utf-8") as f:
        text = f.read()
    if heading not in text:
        text = text.rstrip("\n") + "\n\n" + heading + "\n\n" + intro.rstrip("\n") + "\n"
    text = text.rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"
    with open(PATH, "w", encoding="utf-8") as f:
        f.write(text)
