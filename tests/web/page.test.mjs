// voxd's web page (GET /) in Debian's headless Chromium, driven by Playwright, against a real
// `voxd serve` (tests/web/run_page_test.py starts it with an API key, en-demo, zh-demo and the
// tiny ChatTTS and Chinese Sambert fixture voices, and a second one with a queue of one request):
// speak Chinese text and hear it before it is all made, watch the live panel move, a ChatTTS
// voice's seed and a Sambert voice's emotions, another format made by the server, and the
// messages for empty text, a missing key, a full queue and a server gone. VOXD_BASE_URL,
// VOXD_BUSY_URL, VOXD_KEY; VOXD_SCREENSHOTS: a folder for the page's screenshots (desktop and
// phone width).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { chromium } from "playwright-core";

const base = process.env.VOXD_BASE_URL;
const key = process.env.VOXD_KEY;
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    // This machine's network is closed: no background connections, no sandbox as root.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--autoplay-policy=no-user-gesture-required"],
  });
});
after(async () => { await browser?.close(); });

// readsBlobs: the test reads the page's blob: URLs with fetch, which the page's own CSP (connect-src
// 'self') refuses; the page itself only hands them to the player and to download links.
async function openPage(width = 1200, url = base, readsBlobs = false) {
  const page = await browser.newPage({ viewport: { width, height: 900 }, bypassCSP: readsBlobs });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url + "/");
  return { page, errors };
}

// Clicks Generate and waits for the request to end, well or with an error message.
async function generate(page) {
  await page.click("#generate");
  await page.waitForFunction(() => document.body.dataset.doneAt ||
                             document.getElementById("status").className === "error",
                             null, { timeout: 120000 });
}

// The bytes behind the blob: link with this id (a page opened with readsBlobs), as numbers.
async function blobBytes(page, id) {
  return page.evaluate(async (linkId) => Array.from(new Uint8Array(
      await (await fetch(document.getElementById(linkId).href)).arrayBuffer())), id);
}

async function withKey(page) {
  await page.fill("#key", key);
  await page.dispatchEvent("#key", "change");
  await page.waitForFunction(() => document.querySelectorAll("#voice option").length > 0);
}

test("without the key the page says the server needs one", async () => {
  const { page, errors } = await openPage();
  await page.waitForFunction(() => document.getElementById("status").textContent !== "");
  assert.match(await page.textContent("#status"), /needs an API key/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("Chinese text plays while it is made, then as a file of its length", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  const voices = await page.$$eval("#voice option", (o) => o.map((x) => x.value));
  assert.deepEqual(voices, ["en-demo", "zh-demo", "tiny-chattts", "tiny-sambert-zh"]);
  await page.selectOption("#voice", "zh-demo");
  // A FastSpeech2 voice has no speakers, emotions or sampling: none of their fields shows.
  for (const field of ["#speaker-field", "#emotion-field", "#seed-field", "#temperature-field"]) {
    assert.equal(await page.isVisible(field), false, field);
  }
  await page.fill("#text", "今天天气真好，我们一起去银行。下午三点见！");
  // The live panel's first answered poll (with the key) is the baseline its rate counts from:
  // audio made before it would never show as a rate.
  await page.waitForFunction(() => document.querySelectorAll("#live tr").length > 0);
  await generate(page);
  assert.equal(await page.getAttribute("#status", "class"), "",
               await page.textContent("#status"));
  const first = Number(await page.evaluate(() => document.body.dataset.firstAudioAt));
  const done = Number(await page.evaluate(() => document.body.dataset.doneAt));
  assert.ok(first > 0 && first < done, `first audio at ${first} ms, done at ${done} ms`);
  await page.waitForFunction(() => {
    const audio = document.getElementById("player");
    return !audio.hidden && audio.readyState >= 1 && Number.isFinite(audio.duration);
  });
  const seconds = await page.$eval("#player", (a) => a.duration);
  assert.ok(seconds > 3 && seconds < 9, `${seconds} s for 19 syllables`);
  assert.match(await page.textContent("#status"), /^Done: /);
  assert.ok(await page.isVisible("#download"));
  // The live panel saw the audio being made: a rate above zero at a poll after it.
  await page.waitForFunction(() => [...document.querySelectorAll("#live tr")].some((r) =>
      /^Audio made \(seconds per second\)(\d+\.\d+)$/.test(r.textContent) &&
      Number(r.textContent.match(/(\d+\.\d+)$/)[1]) > 0), null, { timeout: 5000 });
  assert.deepEqual(errors, []);
  await page.close();
});

test("a ChatTTS voice shows a seed: the same seed makes the same audio, another seed other audio",
     async () => {
  const { page, errors } = await openPage(1200, base, true);
  await withKey(page);
  await page.selectOption("#voice", "tiny-chattts");
  assert.ok(await page.isVisible("#seed-field"));
  assert.ok(await page.isVisible("#temperature-field"));
  assert.equal(await page.isVisible("#emotion-field"), false);
  await page.fill("#text", "Hello there.");
  const run = async (seed) => {
    await page.fill("#seed", String(seed));
    await generate(page);
    assert.equal(await page.getAttribute("#status", "class"), "",
                 await page.textContent("#status"));
    return blobBytes(page, "download");
  };
  const first = await run(7);
  assert.ok(first.length > 44 + 2, "a WAV with samples");
  assert.deepEqual(await run(7), first);
  assert.notDeepEqual(await run(8), first);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a Sambert voice lists its emotions, and the server makes the audio in another format",
     async () => {
  const { page, errors } = await openPage(1200, base, true);
  await withKey(page);
  await page.selectOption("#voice", "tiny-sambert-zh");
  assert.ok(await page.isVisible("#emotion-field"));
  assert.equal(await page.isVisible("#seed-field"), false);
  const emotions = await page.$$eval("#emotion option", (o) => o.map((x) => x.value));
  assert.ok(emotions.includes("emotion_happy"), emotions.join(", "));
  await page.selectOption("#emotion", "emotion_happy");
  await page.fill("#text", "你好。");
  await generate(page);
  assert.match(await page.textContent("#status"), /^Done: /);
  assert.ok(await page.isVisible("#other-format"));
  await page.selectOption("#format", "flac");
  await page.click("#convert");
  await page.waitForSelector("#converted");
  assert.equal(await page.getAttribute("#converted", "download"), "speech.flac");
  const flac = await blobBytes(page, "converted");
  assert.equal(String.fromCharCode(...flac.slice(0, 4)), "fLaC");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the live panel shows the server's memory, updated every second", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  await page.waitForFunction(() => document.querySelectorAll("#live tr").length > 5);
  const rows = await page.$$eval("#live tr", (r) => r.map((x) => x.textContent));
  assert.ok(rows.some((r) => /^Weights\d+\.\d MiB$/.test(r)), rows.join(" | "));
  assert.ok(rows.some((r) => /^Leak watchdog/.test(r)), rows.join(" | "));
  const updated = await page.textContent("#live-status");
  await page.waitForFunction((was) => document.getElementById("live-status").textContent !== was,
                             updated, { timeout: 5000 });
  if (process.env.VOXD_SCREENSHOTS) {
    await page.screenshot({ path: process.env.VOXD_SCREENSHOTS + "/web-page.png" });
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: process.env.VOXD_SCREENSHOTS + "/web-page-phone.png",
                            fullPage: true });
  }
  assert.deepEqual(errors, []);
  await page.close();
});

test("text in a language the voice does not speak shows the server's 400", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  await page.selectOption("#voice", "en-demo");
  await page.fill("#text", "今天天气真好。");
  await generate(page);
  assert.equal(await page.getAttribute("#status", "class"), "error");
  assert.match(await page.textContent("#status"), /en-us/);
  assert.deepEqual(errors, []);
  await page.close();
});

test("a full queue shows the server's 503 and when to try again", async () => {
  const busy = process.env.VOXD_BUSY_URL;
  // The busy server takes one request at a time: hold one open, unread, with a long text.
  const held = new AbortController();
  const response = await fetch(busy + "/v1/audio/speech", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + key },
    body: JSON.stringify({ model: "tts-1", voice: "en-demo", response_format: "pcm",
                           input: "A long text that keeps the server busy. ".repeat(60) }),
    signal: held.signal,
  });
  assert.equal(response.status, 200);
  const { page, errors } = await openPage(1200, busy);
  await withKey(page);
  await page.fill("#text", "Hello.");
  await generate(page);
  assert.match(await page.textContent("#status"), /busy; try again in \d+ s/);
  held.abort();
  assert.deepEqual(errors, []);
  await page.close();
});

test("a server gone shows that the connection broke, and the live panel that it does not answer",
     async () => {
  const { page } = await openPage();
  await withKey(page);
  await page.route("**/v1/audio/speech", (route) => route.abort("connectionrefused"));
  await page.route("**/debug/live", (route) => route.abort("connectionrefused"));
  await generate(page);
  assert.match(await page.textContent("#status"), /connection to the server broke/);
  await page.waitForFunction(() =>
      /does not answer/.test(document.getElementById("live-status").textContent), null,
      { timeout: 5000 });
  await page.close();
});

test("every control has a label, and the keyboard alone makes speech", async () => {
  const { page, errors } = await openPage();
  await withKey(page);
  const unlabelled = await page.$$eval("input, select, textarea", (controls) =>
      controls.filter((c) => !c.id || !document.querySelector(`label[for="${c.id}"]`))
              .map((c) => c.outerHTML));
  assert.deepEqual(unlabelled, []);
  await page.focus("#text");
  await page.keyboard.press("Control+A");
  await page.keyboard.type("Typed with keys.");
  // Tab past the voice, speed and key fields to Generate (hidden fields are skipped).
  for (let i = 0; i < 8; ++i) {
    await page.keyboard.press("Tab");
    if (await page.evaluate(() => document.activeElement.id) === "generate") break;
  }
  assert.equal(await page.evaluate(() => document.activeElement.id), "generate");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.body.dataset.doneAt, null, { timeout: 60000 });
  assert.match(await page.textContent("#status"), /^Done: /);
  assert.deepEqual(errors, []);
  await page.close();
});

test("empty text is refused with a message, nothing sent", async () => {
  const { page } = await openPage();
  await withKey(page);
  await page.fill("#text", "   ");
  await page.click("#generate");
  assert.match(await page.textContent("#status"), /nothing to say/);
  await page.close();
});
