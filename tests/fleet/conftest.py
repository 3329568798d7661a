from tests.support.redis import redis_server

__all__ = ["redis_server"]
