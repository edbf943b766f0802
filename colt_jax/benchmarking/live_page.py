"""The live search page (GET / of the service) in a browser: `screenshot(url, query, ...)` opens
`/?q=QUERY&k=K&x=X&method=METHOD` in Debian's Chromium (headless, driven by Playwright; its
files kept out of the user's home by `headless_chromium.py`), waits for the grid and its
thumbnails, and returns a PNG of the whole page.
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request

from colt_jax.benchmarking import headless_chromium
from colt_jax.util.errors import InputError

CHROMIUM = headless_chromium.CHROMIUM
METHODS = ('colt', 'topk', 'mmr', 'umons')  # the page's methods


def _warm_up(url: str, body: dict, timeout_s: float) -> None:
  """The same search once before the page asks (a first request may compile its shapes):
  the timing the screenshot shows is a warm one. A refusal is one line naming the flags."""
  request = urllib.request.Request(url.rstrip('/') + '/search', data=json.dumps(body).encode(),
                                   headers={'Content-Type': 'application/json'})
  try:
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
      response.read()
  except urllib.error.HTTPError as e:
    raise InputError(f'the service refused --query/--k/--per_category/--method: HTTP {e.code} '
                     f'{e.read()[:300].decode(errors="replace")}') from None
  except (urllib.error.URLError, OSError) as e:
    raise InputError(f'{url} (--url): cannot reach the service ({e})') from None


def screenshot(url: str, query: str, k: int, per_category: int, method: str, width: int,
               height: int, timeout_s: float) -> bytes:
  """PNG bytes of the whole page at `url`/ after it answered `query`."""
  try:
    from playwright.sync_api import sync_playwright  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise InputError('Playwright is not installed: pip install -r requirements.txt') from None
  if not os.path.exists(CHROMIUM):
    raise InputError(f'no browser: {CHROMIUM} is missing (apt-get install -y chromium)')
  address = url.rstrip('/') + '/?' + urllib.parse.urlencode(
      {'q': query, 'k': k, 'x': per_category, 'method': method})
  _warm_up(url, {'query': query, 'k': k, 'per_category': per_category, 'list_length': k,
                 'method': method}, timeout_s)
  with sync_playwright() as p, headless_chromium.private_env() as env:
    browser = p.chromium.launch(executable_path=CHROMIUM, args=list(headless_chromium.ARGS),
                                env=env)
    try:
      page = browser.new_page(viewport={'width': width, 'height': height})
      page.set_default_timeout(timeout_s * 1e3)
      page.goto(address)
      page.wait_for_function(
          '() => !document.querySelector("#search").disabled && '
          '(document.querySelector("#results").dataset.count || !document.querySelector('
          '"#error").hidden)')
      if page.is_visible('#error'):
        raise InputError(f'the page shows an error for --query {query!r}: '
                         f'{page.inner_text("#error")}')
      page.wait_for_function('() => [...document.querySelectorAll("#results img")].every('
                             'i => i.complete)')
      return page.screenshot(full_page=True)
    finally:
      browser.close()
