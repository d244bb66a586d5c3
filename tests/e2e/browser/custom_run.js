// A person's path through the Prefect UI, in headless Chromium (Debian's, never downloaded): from the UI's front
// page to the deployment, Run -> Custom run, one field of the form changed, Submit. Prints one JSON line: the flow
// run the UI created, the field's value before the change, the screenshots taken.
//
//   node custom_run.js run  '{"ui": URL, "deployment": NAME, "label": FIELD, "value": V, "artifacts": DIR,
//                             "sections": [TITLE, ...]}'   (how often the form shows each title, reported back)
//   node custom_run.js shot '{"url": URL, "path": PNG}'      (the test's screenshot of a page when a later check fails)
//
// On failure it saves a screenshot of the page as it was and prints its path on stderr, then exits 1.
"use strict";

const path = require("path");
const fs = require("fs");
const { chromium } = require("playwright-core");

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const STEP_MS = 60_000; // a loaded 2-core machine renders the 13,000 px form slowly
const CREATE_MS = 180_000; // Submit to the toast: the server's write of the new run, on a loaded machine

async function browser() {
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
}

async function customRun(opts) {
  fs.mkdirSync(opts.artifacts, { recursive: true });
  const shots = [];
  const b = await browser();
  const page = await b.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(STEP_MS);
  let step = "open the UI";
  const shot = async (name) => {
    const file = path.join(opts.artifacts, `${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    shots.push(file);
    return file;
  };
  try {
    await page.goto(opts.ui + "/");
    step = "open Deployments";
    await page.getByRole("link", { name: "Deployments", exact: true }).first().click();
    step = `open deployment ${opts.deployment}`;
    await page.getByRole("link", { name: opts.deployment, exact: true }).first().click();
    await page.waitForURL(/\/deployments\/deployment\/[0-9a-f-]{36}/);
    step = "Run -> Custom run";
    await page.getByRole("button", { name: "Run", exact: true }).click();
    await page.getByRole("menuitem", { name: "Custom run" }).click();
    await page.waitForURL(/\/run(\?|$)/);
    step = `find form field "${opts.label}"`;
    const field = page.getByLabel(`${opts.label} (Optional)`, { exact: true });
    await field.waitFor();
    const before = await field.inputValue();
    // what a person sees of the form: which section titles it shows (for the test to check the form's shape)
    const labels = {};
    for (const title of opts.sections || []) {
      labels[title] = await page.getByText(`${title} (Optional)`, { exact: true }).count();
    }
    step = `set "${opts.label}" to ${opts.value}`;
    await field.fill(String(opts.value));
    await shot("custom-run-form");
    step = "Submit";
    await page.getByRole("button", { name: "Submit", exact: true }).click();
    step = "View run (the toast the UI shows once the run is created)";
    // the server creates the run before the toast shows: on a loaded machine that took over a minute once
    await page.getByRole("button", { name: "View run" }).or(page.getByRole("link", { name: "View run" })).first()
      .click({ timeout: CREATE_MS });
    await page.waitForURL(/\/runs\/flow-run\/[0-9a-f-]{36}/);
    const flowRunId = page.url().match(/flow-run\/([0-9a-f-]{36})/)[1];
    await shot("flow-run-created");
    console.log(JSON.stringify({ flow_run_id: flowRunId, before, sections: labels, url: page.url(), screenshots: shots }));
  } catch (err) {
    const file = path.join(opts.artifacts, "failed.png");
    await page.screenshot({ path: file, fullPage: true }).catch(() => {});
    console.error(`browser step failed: ${step}: ${err.message.split("\n")[0]}`);
    console.error(`screenshot: ${file} (page ${page.url()})`);
    process.exitCode = 1;
  } finally {
    await b.close();
  }
}

async function screenshot(opts) {
  const b = await browser();
  try {
    const page = await b.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(opts.url);
    await page.waitForLoadState("networkidle", { timeout: 20_000 }).catch(() => {});
    await page.screenshot({ path: opts.path, fullPage: true });
    console.log(JSON.stringify({ screenshot: opts.path }));
  } finally {
    await b.close();
  }
}

const [mode, raw] = process.argv.slice(2);
const opts = JSON.parse(raw || "{}");
(mode === "shot" ? screenshot(opts) : customRun(opts)).catch((err) => {
  console.error(err.stack || String(err));
  process.exit(1);
});
