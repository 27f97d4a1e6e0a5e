"""docs/api.md is what tools/gen_api_docs.py makes of the proto and its comments."""
import os
import subprocess
import sys

from conftest import REPO


def test_docs_api_md_matches_the_proto():
    generated = subprocess.run([sys.executable, os.path.join(REPO, "tools", "gen_api_docs.py")],
                               check=True, capture_output=True, text=True).stdout
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        assert f.read() == generated, (
            "docs/api.md is stale: /usr/bin/python3 tools/gen_api_docs.py > docs/api.md")


def test_docs_api_md_covers_every_rpc_and_message():
    sys.path.insert(0, os.path.join(REPO, "tools"))
    import gen_api_docs
    fd = gen_api_docs.load_descriptor()
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        text = f.read()
    for method in fd.service[0].method:
        assert f"### {method.name}\n" in text
        assert method.name in gen_api_docs.STATUS, f"no status codes listed for {method.name}"
    for message in fd.message_type:
        assert f"### {message.name}\n" in text
