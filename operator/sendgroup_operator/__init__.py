"""sendgroup-operator: the kopf operator that reconciles SendGroup objects."""

__version__ = "0.1.0"
