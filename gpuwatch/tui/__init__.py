"""The Textual dashboard: the app, its widgets, screens and styles."""
