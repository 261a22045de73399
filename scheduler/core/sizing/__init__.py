"""Sizing: what a job asks for and needs of a GPU. The bounds every request must be in (``bounds``), the memory a model
needs (``memory``), MIG layouts and the profile a demand fits (``layouts``), one replica's right-sized demand on one GPU
model (``rightsize``) and the true need utilization is measured against (``need``). It imports the model and the GPU
catalog, nothing above them."""
