"""The API faces over the one core; `gateway.faces.registry` lists their endpoints."""
