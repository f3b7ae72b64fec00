"""Small fakes of serving stacks' admin APIs, each written from that stack's own handler at a
pinned commit (named in its docstring): the request and answer shapes, status codes and
validation errors the knob adapters meet, nothing more. Test fixtures, not product code."""
