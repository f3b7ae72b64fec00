"""The dashboard's Textual CSS (app.tcss), shipped as package data."""
