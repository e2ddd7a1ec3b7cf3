"""The studies of notebooks 04-06, beside the core: the probes, the options study, the library's way, the downstream probe.

``probes`` (named facts scored before and after), ``options`` (each option's worth over seeds),
``library`` (``Trainer`` beside the course's loop), ``downstream`` (name types from frozen
features). Imports the core; the core never imports it.
"""
