"""The oracle's child runtime: what every reference's child driver runs beside (docs/parity.md, "Trust model").

The server of the line protocol (child_server), the noise hook (numpy_hook), coverage of a clone
(child_coverage), interface drift (interface_drift), the loops' seams and stand-ins (child_loops,
loop_seams, loop_stubs, loop_errors) and the placeholders of names a later clone imports (placeholders).
A child gets a private copy of these files, flat beside its reference's `child/` folder
(esverify/references/<name>/child/), and they import each other by bare name. esverify never imports
this package in-process (the audit checks it): reference code runs only in the child.
"""
