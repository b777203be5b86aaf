#!/usr/bin/env python3
"""The chat page at GET / in a real browser: headless Chromium driven by Selenium.

A local cluster (tools/serve.py) on stories260K with an API key. The page must load
without the key (its /v1/models call gets 401 and it says so), take the key from its
settings, list the model, stream an answer to a typed message until [DONE] and show its
token counts, show an API error (max_tokens past the context) in the conversation, clear
it all with New chat, and abort a request with Stop. No script error and no
Content-Security-Policy refusal may reach the browser's console. A screenshot of the
answered chat goes to $FOLIO_BUILD_DIR/test-artifacts/chat_page.png.

    tests/http/chat_page_test.py --bin_dir build/bin
Exit 77 (skipped) without Chromium, chromedriver, python3-selenium or the model.
"""
import argparse
import importlib.util
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_cluster import ROOT, LocalCluster  # noqa: E402

API_KEY = "chat-page-test-key"
ANSWER_TIMEOUT_S = 60


def find_browser():
    """(chromium, chromedriver) paths, or None when either is missing."""
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")
                    if shutil.which(n)), None)
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def model_path():
    """stories260K where LocalCluster looks for it ($FOLIO_MODELS_DIR, else models/)."""
    models = os.environ.get("FOLIO_MODELS_DIR") or os.path.join(ROOT, "models")
    return os.path.join(models, "stories260K", "stories260K.gguf")


def start_browser(browser, driver_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    # Root in a container: no sandbox, no GPU, and /dev/shm is often small.
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1100,900", "--no-first-run", "--disable-extensions"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=options)


class Checks:
    def __init__(self):
        self.failures = []

    def expect(self, ok, what):
        print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures.append(what)
        return ok


def wait_for(driver, condition, timeout_s, what):
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait
    try:
        return WebDriverWait(driver, timeout_s, poll_frequency=0.1).until(lambda d: condition(d))
    except TimeoutException:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def set_field(driver, element_id, value):
    """Types `value` into a settings field and fires its change event, as a user does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value, Keys.TAB)  # leaving the field fires "change"


def last_assistant(driver):
    from selenium.webdriver.common.by import By
    found = driver.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")
    return found[-1] if found else None


def send_message(driver, text):
    """Sends `text` and waits until its answer is no longer streaming; returns the answer."""
    from selenium.webdriver.common.by import By
    before = len(driver.find_elements(By.CSS_SELECTOR, "#log .msg.assistant"))
    driver.find_element(By.ID, "prompt").send_keys(text)
    driver.find_element(By.ID, "send").click()
    wait_for(driver,
             lambda d: len(d.find_elements(By.CSS_SELECTOR, "#log .msg.assistant")) > before,
             10, "the assistant's message to appear")
    wait_for(driver, lambda d: last_assistant(d).get_attribute("data-state") != "streaming",
             ANSWER_TIMEOUT_S, "the stream to finish")
    return last_assistant(driver)


def run(driver, url, artifacts, c):
    from selenium.webdriver.common.by import By
    driver.get(url + "/")
    c.expect(driver.title == "Folio chat", f"the page loads without a key (title {driver.title!r})")
    notice = wait_for(driver, lambda d: d.find_element(By.ID, "notice").text, 10,
                      "the page to report that /v1/models wants a key")
    c.expect("401" in notice, f"the page shows the API's 401 ({notice!r})")

    driver.find_element(By.CSS_SELECTOR, "#settings summary").click()
    set_field(driver, "temperature", "0")
    set_field(driver, "max_tokens", "40")
    set_field(driver, "api-key", API_KEY)  # its change event reloads the models
    model = wait_for(driver, lambda d: d.find_element(By.ID, "model").get_attribute("value"), 10,
                     "the model list after the key was set")
    c.expect(bool(model), f"with the key, the model list comes from /v1/models ({model!r})")
    c.expect(driver.find_element(By.ID, "notice").text == "", "the 401 notice is gone")

    answer = send_message(driver, "Tell me a story about a cat.")
    state = answer.get_attribute("data-state")
    text = answer.find_element(By.CSS_SELECTOR, ".content").text
    usage = answer.find_element(By.CSS_SELECTOR, ".usage").text
    error = answer.find_element(By.CSS_SELECTOR, ".error").text
    c.expect(state == "done", f"the stream ended with [DONE] (state {state!r}, error {error!r})")
    c.expect(bool(text.strip()), f"the answer has streamed text ({text[:60]!r})")
    c.expect(re.search(r"\d+ prompt \+ [1-9]\d* completion tokens", usage) is not None,
             f"token counts from the usage chunk are shown ({usage!r})")
    user_class = driver.find_element(By.CSS_SELECTOR, "#log .msg.user").get_attribute("class")
    c.expect("unsent" not in user_class.split(), "the message counts as sent")
    os.makedirs(artifacts, exist_ok=True)
    shot = os.path.join(artifacts, "chat_page.png")
    c.expect(driver.save_screenshot(shot), f"screenshot saved to {shot}")
    c.expect(driver.execute_script("return localStorage.getItem('folio.chat.api-key')") == API_KEY,
             "the API key is kept in localStorage")

    # An error the API answers (a 400 with OpenAI's error object) shows in the conversation.
    set_field(driver, "max_tokens", "1000000")
    failed = send_message(driver, "And another one.")
    message = failed.find_element(By.CSS_SELECTOR, ".error").text
    c.expect(failed.get_attribute("data-state") == "error" and "HTTP 400" in message
             and "max_tokens" in message,
             f"an API error is shown in the conversation ({message!r})")

    prompt = driver.find_element(By.ID, "prompt")
    c.expect(prompt.get_attribute("value") == "And another one.",
             "the unanswered message is given back to the input")

    driver.find_element(By.ID, "new-chat").click()
    c.expect(not driver.find_elements(By.CSS_SELECTOR, "#log .msg"), "New chat clears the log")

    # Stop: clicked in the same task as Send, it aborts the request before any answer, every
    # time (stories260K answers too fast to stop it mid-stream reliably).
    set_field(driver, "max_tokens", "400")
    prompt.clear()
    prompt.send_keys("Stop me.")
    driver.execute_script("document.getElementById('send').click();"
                          "document.getElementById('stop').click();")
    wait_for(driver, lambda d: last_assistant(d) is not None
             and last_assistant(d).get_attribute("data-state") != "streaming", 10, "the stop")
    state = last_assistant(driver).get_attribute("data-state")
    c.expect(state == "stopped", f"Stop aborts the request (state {state!r})")
    c.expect(driver.find_element(By.ID, "send").is_enabled()
             and not driver.find_element(By.ID, "stop").is_enabled(),
             "after a stop Send is enabled again and Stop is not")
    c.expect(prompt.get_attribute("value") == "Stop me.", "the stopped message is given back")

    console = [e["message"] for e in driver.get_log("browser")]
    bad = [m for m in console if "Uncaught" in m or "Refused" in m or "Content Security" in m]
    c.expect(not bad, f"no script error or CSP refusal in the console ({bad})")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin_dir", required=True)
    args = p.parse_args()
    found = find_browser()
    if found is None:
        print("SKIP: needs chromium and chromedriver (apt-get install chromium chromium-driver)")
        return 77
    if importlib.util.find_spec("selenium") is None:
        print("SKIP: needs python3-selenium")
        return 77
    model = model_path()
    if not os.path.exists(model):
        print(f"SKIP: no model at {model}")
        return 77
    build_dir = os.environ.get("FOLIO_BUILD_DIR") or os.path.dirname(os.path.abspath(args.bin_dir))
    artifacts = os.path.join(build_dir, "test-artifacts")
    c = Checks()
    with LocalCluster(args.bin_dir, [f"--api_key={API_KEY}"], model=model) as cluster:
        driver = start_browser(*found)
        try:
            started = time.time()
            run(driver, cluster.http_url, artifacts, c)
            print(f"browser checks took {time.time() - started:.1f} s")
        except AssertionError as e:
            c.expect(False, str(e))
            os.makedirs(artifacts, exist_ok=True)
            driver.save_screenshot(os.path.join(artifacts, "chat_page_failure.png"))
        finally:
            driver.quit()
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main())
