"""Model specs, the catalog of the reference grid, checkpoint loaders and their audit."""
