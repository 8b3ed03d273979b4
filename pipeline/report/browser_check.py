"""Render report.html in headless Chromium and list what does not fit: `make check-report`, tests/test_report.py.

A copy of the page gets an inline script that, once laid out at WIDTH x HEIGHT, writes into the DOM every
element that overflows (scrollWidth > clientWidth where the overflow is hidden or scrolls), every element
whose right edge passes the viewport, and every image drawn smaller than its natural size (a cut or shrunk
figure); ``--dump-dom`` prints that DOM and we parse the list back. The report itself stays script-free.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1400, 900
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")

PROBE = """<script>
window.addEventListener('load', () => {
  const out = [], vw = document.documentElement.clientWidth;
  const seen = new Set();  // report the outermost element only: its children overflow with it
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                       (el.className ? '.' + el.className : '') + (el.alt ? '[' + el.alt + ']' : '');
  for (const el of document.querySelectorAll('body *')) {
    let p = el.parentElement, inside = false;
    for (; p; p = p.parentElement) if (seen.has(p)) { inside = true; break; }
    if (inside) continue;
    const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    let why = null;
    if (el.tagName === 'IMG' && el.naturalWidth && r.width + 1 < el.naturalWidth)
      why = `image drawn ${Math.round(r.width)} px wide, natural ${el.naturalWidth} px`;
    else if (r.right > vw + 1) why = `right edge ${Math.round(r.right)} px past the ${vw} px viewport`;
    else if (el.scrollWidth > el.clientWidth + 1 && cs.overflowX !== 'visible' && el.tagName !== 'TD')
      why = `content ${el.scrollWidth} px in a ${el.clientWidth} px box (scrolls or is cut)`;
    if (why) { seen.add(el); out.push(name(el) + ': ' + why); }
  }
  const pre = document.createElement('pre');
  pre.id = 'tracepipe-overflow'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def find_browser() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


def overflows(html: Path, browser: str | None = None, width: int = WIDTH) -> list[str]:
    """What overflows in ``html`` rendered ``width`` px wide; RuntimeError when no browser ran."""
    browser = browser or find_browser()
    if browser is None:
        raise RuntimeError("no chromium on PATH (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "probe.html"
        page.write_text(html.read_text().replace("</body>", PROBE + "</body>", 1))
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={width},{HEIGHT}", "--virtual-time-budget=10000", f"--user-data-dir={tmp}/profile",
               "--dump-dom", page.as_uri()]  # fmt: skip
        dom = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False).stdout
    m = re.search(r'<pre id="tracepipe-overflow">(.*?)</pre>', dom, re.S)
    if m is None:
        raise RuntimeError(f"{browser} rendered no probe result (DOM of {len(dom)} chars)")
    import html as _html

    return json.loads(_html.unescape(m.group(1)))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m pipeline.report.browser_check REPORT.html", file=sys.stderr)
        return 2
    found = overflows(Path(argv[0]))
    for line in found:
        print(f"{argv[0]}: {line}")
    print(f"{len(found)} element(s) overflow at {WIDTH} px" if found else f"nothing overflows at {WIDTH} px")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
