#!/usr/bin/env bash
# Installs what tests/test_browser.py needs, on Debian/Ubuntu:
#   - Chromium from Debian's packages (/usr/bin/chromium), after `apt-get update`;
#   - the Python package playwright in the project venv (.venv, made by `make setup` if
#     missing). Its wheel carries Playwright's own Node driver; no browser is ever
#     downloaded (`playwright install` is never run: the tests launch /usr/bin/chromium).
# Idempotent: what is already there is kept. It never fails the CI run: where something
# cannot be installed (no apt-get, not root, no network) it says why on stderr and in
# test-artifacts/browser/setup-failed.txt, and the browser tests skip with that reason.
#
#   bash .ci/browser-setup.sh          # then: make test   (or .venv/bin/python -m pytest -m browser)
#
# Environment: VENV (default .venv), WORKBENCH_CHROMIUM (default /usr/bin/chromium),
# PLAYWRIGHT_SPEC (default "playwright>=1.49,<2").
set -uo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
CHROMIUM=${WORKBENCH_CHROMIUM:-/usr/bin/chromium}
PLAYWRIGHT_SPEC=${PLAYWRIGHT_SPEC:-"playwright>=1.49,<2"}
NOTE=test-artifacts/browser/setup-failed.txt
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1     # belt and braces: nothing here fetches a browser

mkdir -p "$(dirname "$NOTE")"
rm -f "$NOTE"
failed=0
fail() {
    echo "browser-setup: $*" >&2
    echo "$*" >>"$NOTE"
    failed=1
}

# ---------------------------------------------------------------- Chromium (Debian package)
if [ -x "$CHROMIUM" ]; then
    echo "browser-setup: chromium already installed: $("$CHROMIUM" --version 2>/dev/null | head -1)"
elif ! command -v apt-get >/dev/null 2>&1; then
    fail "no apt-get on this machine: install Chromium yourself and point WORKBENCH_CHROMIUM at it"
else
    SUDO=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO=(sudo -n)
        fi
    fi
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        fail "not root and no password-less sudo: cannot apt-get install chromium"
    else
        export DEBIAN_FRONTEND=noninteractive
        echo "browser-setup: apt-get update && apt-get install chromium (a few minutes the first time)"
        if ! timeout 600 "${SUDO[@]}" apt-get update -qq; then
            fail "apt-get update failed (no network to the Debian mirrors?)"
        elif ! timeout 1200 "${SUDO[@]}" apt-get install -y -qq chromium >/dev/null; then
            fail "apt-get install chromium failed"
        elif [ ! -x "$CHROMIUM" ]; then
            fail "apt-get installed chromium but $CHROMIUM is not there"
        else
            echo "browser-setup: installed $("$CHROMIUM" --version 2>/dev/null | head -1)"
        fi
    fi
fi

# ---------------------------------------------------------------- playwright (Python, in the venv)
if [ ! -x "$VENV/bin/python" ]; then
    echo "browser-setup: no $VENV yet: make setup"
    make setup || fail "make setup failed: no project venv to install playwright into"
fi
if [ -x "$VENV/bin/python" ]; then
    if "$VENV/bin/python" -c "import playwright.sync_api" 2>/dev/null; then
        echo "browser-setup: playwright already in $VENV ($("$VENV/bin/python" -m pip show playwright 2>/dev/null | sed -n 's/^Version: //p'))"
    elif timeout 600 "$VENV/bin/python" -m pip install --quiet "$PLAYWRIGHT_SPEC"; then
        echo "browser-setup: installed playwright $("$VENV/bin/python" -m pip show playwright 2>/dev/null | sed -n 's/^Version: //p') into $VENV"
    else
        fail "pip install '$PLAYWRIGHT_SPEC' into $VENV failed (no network to PyPI?)"
    fi
fi

if [ "$failed" -ne 0 ]; then
    echo "browser-setup: incomplete; the browser tests will skip (see $NOTE)" >&2
fi
exit 0
