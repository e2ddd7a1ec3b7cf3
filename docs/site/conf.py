"""Sphinx settings for the course's website: ``python -m hp_mlm.ops.site build`` (see hp_mlm/ops/site.py)."""

project = "hp-mlm"
author = "the hp-mlm authors"
copyright = "the hp-mlm authors, MIT licence"
extensions = ["myst_nb"]
root_doc = "index"

# The committed notebooks are shown as they are, outputs included: never executed here.
nb_execution_mode = "off"
# Anchors for headings as GitHub makes them, so links such as glossary.md#label--100 resolve.
myst_heading_anchors = 4
myst_enable_extensions = ["dollarmath"]
# Only the notebooks' markdown and code are pages; no other file of the staged folder is read.
exclude_patterns = ["**/.ipynb_checkpoints"]

html_theme = "sphinx_book_theme"
html_title = "hp-mlm: teach BERT a book"
html_theme_options = {
    "repository_url": "https://github.com/hp-mlm/hp-mlm",
    "use_repository_button": True,
    "home_page_in_toc": True,
    "show_toc_level": 2,
}
html_last_updated_fmt = None
html_show_sourcelink = False
# Straight quotes as written: code names and copied commands stay exact.
smartquotes = False
