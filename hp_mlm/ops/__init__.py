"""Operations: what runs the course from a terminal, and what only a real run needs.

``cli`` and ``flags`` (``python -m hp_mlm ...``), ``job`` and ``report`` (the main job), ``doctor``
(the machine check), ``troubleshooting`` (each error's help entry), ``allocator`` (CPU memory kept
while training), ``versions`` (the import-time version guard). A learner never has to read these;
the core never imports them.
"""
