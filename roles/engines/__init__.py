"""Generation engines a generator rank can drive (``torch``, ``vllm``)."""
