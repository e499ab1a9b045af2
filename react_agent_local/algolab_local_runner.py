"""Start the ReAct Agent Local runner on 127.0.0.1:4890 with the Python that runs this file.

    python algolab_local_runner.py [--port 4890] [--allow-origin http://127.0.0.1:8017] ...

Dependencies are those of *this* interpreter (``GET /status`` reports them); nothing here looks for
other environments. See ``python algolab_local_runner.py --help``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent.runner.server import main  # noqa: E402

if __name__ == "__main__":
    main()
