"""What a screen shows, without the screen: one ``NodeSession`` per node dashboard (live, a
replay, or a node of the fleet), built by the factories in ``node.py`` and ``fleet.py``.

Sits above control / monitor / record / plan and below ``tui``: no Textual, no Rich here.
"""
