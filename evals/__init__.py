"""The routing eval set of the support desk (docs/evals.md, "Measured on a local model")."""
