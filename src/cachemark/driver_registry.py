"""The drivers in other stacks (docs/drivers.md): one row each — the ``client=`` name, the schemes
it runs, how to start it and what to install when it is missing.

A driver is a folder under drivers/ and one row here: the scheme rows take their ``client=``
names from it (schemes.drivers_of), run/driver.py starts it, and the conformance suite
(tests/test_driver_conformance.py) runs every row. It sits low (it imports only errors) so
that the scheme registry can read it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import BackendMissing

DRIVERS_DIR = Path(os.environ.get("CACHEMARK_DRIVERS", Path(__file__).resolve().parents[2] / "drivers"))
DRIVER_OPS = frozenset({"get", "set", "delete", "exists", "get_many"})
_REDIS_LIKE = frozenset({"redis", "rediss", "valkey", "valkeys"})
_MEMCACHED = frozenset({"memcached"})


@dataclass(frozen=True)
class DriverSpec:
    """A driver: how to start it, what it needs built, and what to install when it is missing."""

    name: str  # the ``client=`` value
    schemes: frozenset[str]  # the URL schemes whose targets it runs
    runtime_env: str  # an environment variable naming the runtime (or, for a compiled driver, the program)
    runtime: str  # its default; "" when argv[0] is the program itself
    argv: tuple[str, ...]  # after the runtime; "{dir}" is DRIVERS_DIR
    install: str  # the one line saying what to install
    framework: str  # the library (in hello's "libraries") whose version names the client
    built: str = ""  # a file under DRIVERS_DIR that `make drivers` makes (node_modules, a jar, a binary)
    tags: bool = False  # runs tagged workloads: writes with tags, and the ``clean`` op
    # where a cache that cannot list its keys (memcached) gets the tag scheme's own keys, for the cleanup:
    # (per item "{ns}…{i}", per tag "{ns}…{j}") — Symfony's TagAwareAdapter: "\0tags\0" as "/tags/"
    tag_keys: tuple[str, str] | None = None
    # a delete answers hit or miss by whether the key existed; False: its client cannot say (Symfony's
    # deleteItem answers true either way), so a delete is ok (outcome 0) or an error
    delete_hit: bool = True

    @property
    def ops(self) -> frozenset[str]:
        return DRIVER_OPS | {"clean"} if self.tags else DRIVER_OPS

    def command(self) -> list[str]:
        """The driver's command line; BackendMissing (one line: what to install) when it cannot start."""
        named = os.environ.get(self.runtime_env)
        argv = [a.replace("{dir}", str(DRIVERS_DIR)) for a in self.argv]
        if not self.runtime:  # a compiled driver: argv[0] is the program (the environment may name another)
            program = named or argv[0]
            if not Path(program).is_file():
                raise BackendMissing(f"client={self.name}: the driver is not built ({program} is missing): "
                                     f"{self.install}")
            return [program, *argv[1:]]
        runtime = shutil.which(named or self.runtime)
        if runtime is None:
            raise BackendMissing(f"client={self.name} needs {named or self.runtime!r}, which is not installed: "
                                 f"{self.install} (or set {self.runtime_env})")
        if self.built and not (DRIVERS_DIR / self.built).exists():
            raise BackendMissing(f"client={self.name}: the driver is not built ({DRIVERS_DIR / self.built} is "
                                 f"missing): {self.install}")
        script = next(Path(a) for a in argv if a.startswith(str(DRIVERS_DIR)))
        if not script.is_file():
            raise BackendMissing(f"client={self.name}: the driver {script} is missing (set CACHEMARK_DRIVERS)")
        return [runtime, *argv]


_NODE = "install Node.js and npm, then `make drivers` (npm ci in drivers/node)"
_JAVA = "install a JDK (17+) and Maven, then `make drivers` (mvn package in drivers/java)"
_GO = "install Go (1.26+), then `make drivers` (go build in drivers/go)"
_JAR = "{dir}/java/target/cachemark-driver.jar"
DRIVERS = {d.name: d for d in (
    DriverSpec("ruby-activesupport", _REDIS_LIKE | {"memcached", "memory", "file"}, "CACHEMARK_RUBY", "ruby",
               ("{dir}/ruby/cachemark_driver.rb",), "apt-get install ruby ruby-activesupport ruby-dalli ruby-redis",
               "activesupport"),
    DriverSpec("php-symfony", _REDIS_LIKE | {"memcached", "file"}, "CACHEMARK_PHP", "php",
               ("{dir}/php/cachemark_driver.php",), "apt-get install php-cli php-redis php-memcached php-symfony-cache",
               "symfony/cache", tags=True, tag_keys=("{ns}/tags/{i}", "{ns}t{j}/tags/"), delete_hit=False),
    DriverSpec("node-ioredis", _REDIS_LIKE, "CACHEMARK_NODE", "node", ("{dir}/node/cachemark_driver.js", "ioredis"),
               _NODE, "ioredis", built="node/node_modules/ioredis/package.json"),
    DriverSpec("node-redis", _REDIS_LIKE, "CACHEMARK_NODE", "node", ("{dir}/node/cachemark_driver.js", "redis"),
               _NODE, "redis", built="node/node_modules/redis/package.json"),
    DriverSpec("node-memjs", _MEMCACHED, "CACHEMARK_NODE", "node", ("{dir}/node/cachemark_driver.js", "memjs"),
               _NODE, "memjs", built="node/node_modules/memjs/package.json"),
    DriverSpec("java-jedis", _REDIS_LIKE, "CACHEMARK_JAVA", "java", ("-jar", _JAR, "jedis"), _JAVA, "jedis",
               built="java/target/cachemark-driver.jar"),
    DriverSpec("java-lettuce", _REDIS_LIKE, "CACHEMARK_JAVA", "java", ("-jar", _JAR, "lettuce"), _JAVA, "lettuce",
               built="java/target/cachemark-driver.jar"),
    DriverSpec("java-spymemcached", _MEMCACHED, "CACHEMARK_JAVA", "java", ("-jar", _JAR, "spymemcached"), _JAVA,
               "spymemcached", built="java/target/cachemark-driver.jar"),
    DriverSpec("go-redis", _REDIS_LIKE, "CACHEMARK_GO_DRIVER", "", ("{dir}/go/cachemark-driver", "go-redis"), _GO,
               "go-redis", built="go/cachemark-driver"),
    DriverSpec("go-memcache", _MEMCACHED, "CACHEMARK_GO_DRIVER", "", ("{dir}/go/cachemark-driver", "gomemcache"),
               _GO, "gomemcache", built="go/cachemark-driver"),
)}
