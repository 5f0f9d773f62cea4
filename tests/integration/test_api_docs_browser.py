"""The API docs in a real browser: Debian's Chromium, driven by Selenium through Debian's
chromedriver (the same package version, so they always match; nothing is downloaded).

The self-hosted Swagger UI at ``/docs`` loads with no network beyond the API, "Authorize"
takes an API key as a bearer token, "Try it out" then "Execute" on ``GET /v1/models`` renders
a 200 with the models, and ``POST /v1/documents`` offers the multipart form with a file
picker. The API runs in this process against the real Redis (rate limit) and a SQLite store.
``make test`` installs Chromium (the Makefile's ``browser`` target); without it the test is
skipped, saying why.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.auth import create_key
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import DatabaseSettings, Settings
from tests.integration.stack import ApiServer

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Flags that run Chromium headless as root in a container with nothing phoning home.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,2000",
)
WAIT_S = 20

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
        reason="Debian's chromium and chromium-driver are not installed (make browser)",
    ),
]
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is a dev dependency")
By = pytest.importorskip("selenium.webdriver.common.by").By
expected = pytest.importorskip("selenium.webdriver.support.expected_conditions")
WebDriverWait = pytest.importorskip("selenium.webdriver.support.ui").WebDriverWait


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[str, str]]:
    settings = Settings().model_copy(
        update={"database": DatabaseSettings(url=f"sqlite:///{tmp_path / 'docs.db'}")}
    )
    upgrade_head(settings.database_url)
    # No rate limit: the window is keyed by the key's row id, which a fresh SQLite store shares
    # with other stores' keys on the same Redis.
    sessions = make_session_factory(make_engine(settings.database_url))
    key = create_key(sessions, "docs-browser", rate_per_minute=0)[0]
    server = ApiServer(settings).start()
    try:
        yield server.url, key
    finally:
        server.stop()


@pytest.fixture
def browser() -> Iterator[Any]:
    profile = tempfile.mkdtemp(prefix="ragstream-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _operation(driver: Any, method: str, path: str) -> Any:
    """The operation block of ``method path``, expanded."""
    xpath = f"//div[contains(@class,'opblock-{method}')][.//*[@data-path='{path}']]"
    block = WebDriverWait(driver, WAIT_S).until(
        expected.presence_of_element_located((By.XPATH, xpath))
    )
    if "is-open" not in (block.get_attribute("class") or ""):
        block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    WebDriverWait(driver, WAIT_S).until(
        lambda _: block.find_elements(By.CSS_SELECTOR, ".try-out__btn")
    )
    return block


def test_docs_authorize_with_a_bearer_key_and_run_a_request(
    api: tuple[str, str], browser: Any
) -> None:
    url, key = api
    driver = browser
    wait = WebDriverWait(driver, WAIT_S)
    driver.get(f"{url}/docs")
    wait.until(expected.element_to_be_clickable((By.CSS_SELECTOR, ".btn.authorize"))).click()

    # The "bearer (http, Bearer)" scheme of the Authorize dialog takes the key.
    bearer = wait.until(
        expected.presence_of_element_located(
            (By.XPATH, "//div[contains(@class,'auth-container')][.//h4[contains(., 'bearer')]]")
        )
    )
    bearer.find_element(By.CSS_SELECTOR, "input").send_keys(key)
    bearer.find_element(By.CSS_SELECTOR, "button.authorize").click()
    logout = (By.CSS_SELECTOR, "button[aria-label='Remove authorization']")
    wait.until(expected.presence_of_element_located(logout))  # the key is applied
    driver.find_element(By.CSS_SELECTOR, ".btn-done").click()

    models = _operation(driver, "get", "/v1/models")
    models.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    wait.until(lambda _: models.find_elements(By.CSS_SELECTOR, ".btn.execute"))
    models.find_element(By.CSS_SELECTOR, ".btn.execute").click()
    status = wait.until(
        lambda _: models.find_elements(
            By.CSS_SELECTOR, ".live-responses-table .response .response-col_status"
        )
    )
    assert status[0].text.strip().startswith("200"), status[0].text
    body = models.find_element(
        By.CSS_SELECTOR, ".live-responses-table .response-col_description pre"
    ).text
    assert '"evidence"' in body and '"object": "list"' in body, body
    curl = models.find_element(By.CSS_SELECTOR, ".curl-command").text
    assert f"Authorization: Bearer {key}" in curl, curl

    # The upload form: POST /v1/documents switched to multipart/form-data has a file picker.
    documents = _operation(driver, "post", "/v1/documents")
    documents.find_element(By.CSS_SELECTOR, ".try-out__btn").click()
    select = wait.until(
        lambda _: documents.find_elements(
            By.CSS_SELECTOR, ".opblock-section-request-body select, .body-param-content-type select"
        )
    )
    select[0].find_element(By.CSS_SELECTOR, "option[value='multipart/form-data']").click()
    assert wait.until(lambda _: documents.find_elements(By.CSS_SELECTOR, "input[type='file']"))
