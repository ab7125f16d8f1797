"""``kubectl-sendgroup``, the kubectl plugin: pause, resume, cancel, complete, status.

Modules: :mod:`.main` (click commands), :mod:`.api` (the API server: kubeconfig, list, get,
one-field merge patch, errors to exit codes), :mod:`.render` (pure: the status table),
:mod:`.gitops` (pure: is the object ArgoCD-managed?).
"""

from sendgroup_operator.cli.main import main

__all__ = ["main"]
