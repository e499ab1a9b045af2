"""Models behind one seam (``model_policy``): the provider registry, the choice of a model from flags or
a request, the traced call, Decision parsing, and the local, served and scripted backends."""
