"""integrations: adapters from executors to the outside world (pymongo, a thread portal)."""
