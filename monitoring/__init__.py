"""Prometheus and Grafana configuration for flashbox, and the code that generates it."""
