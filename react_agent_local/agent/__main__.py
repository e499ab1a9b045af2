import sys

from agent.cli.main import main

# subtle: the guard matters; the tool worker process is started with "spawn", which imports the
# parent's main module again (as __mp_main__), and must not run the command a second time.
if __name__ == "__main__":
    sys.exit(main())
