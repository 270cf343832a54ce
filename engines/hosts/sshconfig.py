"""What ssh_config makes of a host's ``ssh`` target, for messages that name the real address and the fix.

asyncssh applies ssh_config itself when it connects; this module reads the same files (with
asyncssh's own parser) only to explain a refusal: the HostName an alias resolved to, the
``[host]:port`` name known_hosts uses, the known_hosts file in effect, and the alias entries that
hold an IdentityFile for an address typed directly as ``user@host:port``.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"


def split_target(target: str) -> tuple[str, str | None, int | None]:
    """``user@host:port`` (or an alias) into host, user and port; None leaves them to ssh_config."""
    user: str | None = None
    port: int | None = None
    host = target
    if "@" in host:
        user, host = host.rsplit("@", 1)
    if host.count(":") == 1:
        name, _, p = host.partition(":")
        if p.isdigit():
            host, port = name, int(p)
    elif host.startswith("[") and "]:" in host:
        name, _, p = host[1:].partition("]:")
        if p.isdigit():
            host, port = name, int(p)
    return host, user, port


@dataclass(frozen=True)
class SshTarget:
    """A target as ssh_config resolves it."""

    target: str
    alias: str
    hostname: str
    port: int
    user: str | None
    identity_files: tuple[str, ...]
    known_hosts: tuple[str, ...]
    #: The ssh_config files servelab reads (None: ssh's default, ~/.ssh/config).
    config_files: tuple[str, ...] | None
    #: True when a ``Host`` entry of ssh_config gave this alias its HostName.
    is_alias: bool
    #: Alias entries that point at the same address and name an IdentityFile.
    key_aliases: tuple[str, ...] = ()

    @property
    def known_hosts_name(self) -> str:
        """How known_hosts names this server: ``host`` on port 22, else ``[host]:port``."""
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"

    @property
    def known_hosts_file(self) -> str:
        return self.known_hosts[0] if self.known_hosts else DEFAULT_KNOWN_HOSTS

    def ssh_command(self) -> str:
        """The ``ssh`` command a user types to reach the same server (and accept its key once)."""
        words = ["ssh"]
        if self.config_files:
            words += ["-F", self.config_files[0]]
        if self.is_alias:
            return shlex.join([*words, self.alias])
        if self.port != 22:
            words += ["-p", str(self.port)]
        return shlex.join([*words, f"{self.user}@{self.hostname}" if self.user else self.hostname])

    def keyscan_command(self) -> str:
        words = ["ssh-keyscan"] + (["-p", str(self.port)] if self.port != 22 else []) + [self.hostname]
        return f"{shlex.join(words)} >> {self.known_hosts_file}"

    def host_key_advice(self, why: str) -> str:
        """One line: unknown or changed key, the known_hosts name with its port, and the command that fixes it."""
        name = self.known_hosts_name
        if known_in(name, [os.path.expanduser(f) for f in self.known_hosts or (DEFAULT_KNOWN_HOSTS,)]):
            return (
                f"host key refused: the key {name} offers does not match known_hosts ({self.known_hosts_file}); "
                f"if the host was reinstalled, remove the old key with `ssh-keygen -R '{name}' -f {self.known_hosts_file}` "
                f"and add the new one with `{self.keyscan_command()}` ({why})"
            )
        return (
            f"host key refused: {name} is not in known_hosts ({self.known_hosts_file}); "
            f"add it with `{self.keyscan_command()}`, or connect once with `{self.ssh_command()}` and accept the key"
        )

    def auth_hint(self) -> str:
        """For a direct ``user@host:port`` with no IdentityFile: the alias entries that have one."""
        if self.is_alias or self.identity_files:
            return ""
        where = self.config_files[0] if self.config_files else DEFAULT_CONFIG
        if self.key_aliases:
            names = ", ".join(self.key_aliases)
            return (
                f"; {self.target} is a direct address with no IdentityFile, but {where} gives one to "
                f"Host {names} for the same address: use ssh = \"{self.key_aliases[0]}\" in hosts.toml"
            )
        return (
            f"; {self.target} is a direct address and no IdentityFile applies to it: if the key is set "
            f"in an alias entry of {where}, use that alias as ssh in hosts.toml (or load the key into ssh-agent)"
        )

    def resolve_error(self, why: str) -> str:
        if self.hostname != self.alias:
            where = self.config_files[0] if self.config_files else DEFAULT_CONFIG
            return f"cannot resolve {self.hostname} (HostName of {self.alias} in {where}): {why}"
        return f"cannot resolve {self.hostname}: {why}"


def _config_files(paths: list[str] | None) -> list[Path]:
    if paths is not None:
        return [Path(p).expanduser() for p in paths]
    default = Path(DEFAULT_CONFIG).expanduser()
    return [default] if default.is_file() else []


def _load(files: list[Path], host: str, user: str | None, port: int | None) -> dict[str, object]:
    """asyncssh's reading of the config for one host (empty when asyncssh or the files cannot be read)."""
    try:
        from asyncssh.config import SSHClientConfig

        cfg = SSHClientConfig.load(None, [str(f) for f in files if f.is_file()], False, False, False, getpass.getuser(), user or (), host, port or ())
    except Exception:  # an unreadable config only costs the hint, never the message
        return {}
    keys = ("Hostname", "Port", "User", "IdentityFile", "UserKnownHostsFile")
    return {k: cfg.get(k) for k in keys if cfg.get(k) is not None}


def _host_patterns(files: list[Path]) -> list[str]:
    """Plain names of the ``Host`` lines of the config files (no wildcards or negations)."""
    names: list[str] = []
    for f in files:
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.replace("=", " ").split()
            if len(words) >= 2 and words[0].lower() == "host":
                names += [w for w in words[1:] if not any(c in w for c in "*?!")]
    return names


def resolve_target(target: str, config_paths: list[str] | None) -> SshTarget:
    """The target as ssh_config resolves it (best effort: messages only)."""
    host, user, port = split_target(target)
    files = _config_files(config_paths)
    opts = _load(files, host, user, port)
    hostname = str(opts.get("Hostname") or host)
    real_port = int(port or opts.get("Port") or 22)  # type: ignore[call-overload]
    identities = tuple(str(i) for i in opts.get("IdentityFile") or ())  # type: ignore[attr-defined]
    known = tuple(str(k) for k in opts.get("UserKnownHostsFile") or ())  # type: ignore[attr-defined]
    is_alias = "Hostname" in opts and port is None
    key_aliases: list[str] = []
    if not is_alias and not identities:
        for name in _host_patterns(files):
            other = _load(files, name, None, None)
            if str(other.get("Hostname") or name) == hostname and int(other.get("Port") or 22) == real_port and other.get("IdentityFile"):  # type: ignore[call-overload]
                key_aliases.append(name)
    return SshTarget(
        target=target,
        alias=host,
        hostname=hostname,
        port=real_port,
        user=user or (str(opts["User"]) if "User" in opts else None),
        identity_files=identities,
        known_hosts=known,
        config_files=tuple(config_paths) if config_paths is not None else None,
        is_alias=is_alias,
        key_aliases=tuple(dict.fromkeys(key_aliases)),
    )


def known_in(name: str, files: list[str]) -> bool:
    """Whether any known_hosts file has a key for ``name`` (plain or hashed entries)."""
    for path in files:
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split()
            if not words or words[0].startswith("#"):
                continue
            if words[0].startswith("@"):
                if words[0] != "@cert-authority" or len(words) < 2:
                    continue
                words = words[1:]
            if _matches(words[0], name):
                return True
    return False


def _matches(field: str, name: str) -> bool:
    if field.startswith("|1|"):
        try:
            salt, digest = (base64.b64decode(part) for part in field[3:].split("|", 1))
        except (ValueError, binascii.Error):
            return False
        return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest)
    return name in field.split(",")
