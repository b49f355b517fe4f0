print("storectl-bench: not built yet")
