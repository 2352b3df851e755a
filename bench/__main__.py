"""``python -m bench core|ranking|query|scale [...]``: benchmarks that print figures (never
shipped)."""

from __future__ import annotations

import sys

from bench import core, query, ranking, scale

COMMANDS = {"core": core.main, "ranking": ranking.main, "query": query.main,
            "scale": scale.main}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m bench {{{','.join(COMMANDS)}}} [options]", file=sys.stderr)
        return 2
    return int(COMMANDS[argv[0]](argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
