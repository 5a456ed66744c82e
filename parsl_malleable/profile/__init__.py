"""Online scalability profiling of running training jobs."""
