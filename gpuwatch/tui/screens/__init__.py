"""Full screens and modals pushed over the dashboard."""
