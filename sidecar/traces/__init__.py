"""Traces of the node's own traffic: recording them (``recorder``, ``writer``), reading a
record directory (``store``), labelling them (``label``), calibrating the detectors on
them (``calibrate``) and the page that shows it (``report``)."""
