"""Hosts: this machine (``local``) or a GPU box over SSH, behind one :class:`~engines.hosts.base.Host` interface."""
