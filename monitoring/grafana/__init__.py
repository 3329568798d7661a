"""Grafana dashboards as code (grafana-foundation-sdk) and their provisioning."""
