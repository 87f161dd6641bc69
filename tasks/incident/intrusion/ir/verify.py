"""Check the containment of the web-3 intrusion and the IOC list in IOCS.txt.

host/ is the captured image of web-3's disk. The checks compare against the indicators the
forensics team confirmed, kept here only as SHA-256 digests of their values so that reading this
file tells nothing about the intrusion. Exit 0 and `CONTAINED` when every persistence mechanism
is gone from host/, the dropped payload is preserved (not executable) under quarantine/, the
legitimate access and jobs are intact, and IOCS.txt names every confirmed indicator.
"""

import base64
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOST = ROOT / "host"
CONFIRMED = {
    ("ip", "0c25434b09c62046f88142b1412b949ea7e9bc61479d71b2b74ab8dbc3d2d946"),
    ("ip", "bfeb4c6192985efa05e7fa0740ac45708a515e569e7edaec7fc060ff72b44a0c"),
    ("file", "5f0ac3a45d784ccc0d507db31ff9f6e8204157eb12e5bbd18ed44206f9ead538"),
    ("sha256", "c1b3271d13c9b52bf6bc513694c0614cbccd81c0ba7a5a17442a5ee278559d02"),
    ("cron", "705072c8bbde040ed6023c0a0798257fbad2232212a8bd71e87e03b291a790fb"),
    ("unit", "bf378901338d266e6b09e2e16f972cf2a0a1ba671cb6b376797237a55fd23ba7"),
    ("ssh-key", "0111409bf5b6b1f689f6d716dcb1dcf11caa2b2fca470241559d05e921c02088"),
}
LEGIT_KEYS = {"SHA256:F9PpGsngzsZUNdILKaPPnVMowTBXWl43kYojRg2Y8lg",   # alice@laptop-7
              "SHA256:AVLp5MVQPuVN21outJNeQ1jECeaGcPNchYKjWkgdrRQ"}   # ci@deploy-runner
LEGIT_FILES = ["etc/cron.d/logrotate", "etc/cron.d/certbot", "etc/systemd/system/shop-web.service",
               "etc/systemd/system/multi-user.target.wants/shop-web.service"]
PATH_KINDS = ("file", "cron", "unit")


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def confirmed(kind: str, value: str) -> bool:
    return (kind, digest(value)) in CONFIRMED


def host_path(p: Path) -> str:
    return "/" + p.relative_to(HOST).as_posix()


def fingerprint(line: str) -> str | None:
    """OpenSSH's SHA256 fingerprint of an authorized_keys line (None for blanks, comments)."""
    parts = line.split()
    if len(parts) < 2 or line.lstrip().startswith("#"):
        return None
    blob = base64.b64decode(parts[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def containment_problems() -> list[str]:
    found = []
    for p in sorted(HOST.rglob("*")):
        if any(confirmed(k, host_path(p)) for k in PATH_KINDS):
            found.append(f"{host_path(p)} is still on the host")
        elif p.is_symlink() and confirmed("unit", f"/etc/systemd/system/{p.name}"):
            found.append(f"{host_path(p)} still enables the attacker's unit")
        elif p.is_file() and not p.is_symlink() and p.parts[-3:-1] != ("var", "log"):
            words = p.read_text(errors="replace").split()
            if any(confirmed("file", w) for w in words) and "bash_history" not in p.name:
                found.append(f"{host_path(p)} still runs the dropped payload")
    for keys in HOST.glob("home/*/.ssh/authorized_keys"):
        fps = {fingerprint(line) for line in keys.read_text().splitlines()} - {None}
        if any(confirmed("ssh-key", fp) for fp in fps):
            found.append(f"{host_path(keys)} still holds the attacker's key")
        if "deploy" in keys.parts and not LEGIT_KEYS <= fps:
            found.append(f"{host_path(keys)} lost a legitimate key")
    found += [f"/{f} (legitimate) is gone" for f in LEGIT_FILES if not (HOST / f).exists()]
    kept = [p for p in (ROOT / "quarantine").rglob("*") if p.is_file() and not p.is_symlink()
            and confirmed("sha256", hashlib.sha256(p.read_bytes()).hexdigest())]
    if not kept:
        found.append("the dropped payload is not preserved under quarantine/ (evidence)")
    elif any(p.stat().st_mode & 0o111 for p in kept):
        found.append("the quarantined payload is still executable")
    return found


def ioc_problems() -> list[str]:
    path = ROOT / "IOCS.txt"
    if not path.is_file():
        return ["IOCS.txt is missing"]
    listed = set()
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, value = line.strip().partition(" ")
        value = value.strip()
        if kind in PATH_KINDS and value.startswith("host/"):
            value = value[4:]
        if value in LEGIT_KEYS:
            return [f"IOCS.txt line {n}: {value} is a legitimate key"]
        listed.add((kind, digest(value)))
    missing = CONFIRMED - listed
    if missing:
        kinds = sorted(k for k, _ in missing)
        return [f"IOCS.txt misses {len(missing)} confirmed indicator(s) ({', '.join(kinds)})"]
    return []


def main() -> int:
    found = containment_problems() + ioc_problems()
    if found:
        print("NOT CONTAINED: " + "; ".join(found))
        return 1
    print(f"CONTAINED: persistence removed, payload quarantined, {len(CONFIRMED)}/"
          f"{len(CONFIRMED)} confirmed IOCs listed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
