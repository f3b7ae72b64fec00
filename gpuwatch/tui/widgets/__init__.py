"""The dashboard's panels and charts."""
