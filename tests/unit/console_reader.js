// Runs console.js's own stream reader (`streamQuery`) and refusal test (`isRefusal`) on the
// SSE body given on stdin, as the console runs them on a POST /v1/query stream, with `fetch`
// stubbed to answer that body. Prints one JSON line: the request the console sent, the event
// names, the final event's data and the console's refusal verdict on it.
// Usage: node console_reader.js <console.js> <question> < stream.txt
const fs = require("fs");
const [consoleJs, question] = process.argv.slice(2);
const src = fs.readFileSync(consoleJs, "utf8");

function pick(name) {
  const at = src.search(new RegExp("^(async )?function " + name + "\\(", "m"));
  if (at < 0) throw new Error("console.js has no function " + name);
  return src.slice(at, src.indexOf("\n}\n", at) + 3);
}

const sse = fs.readFileSync(0, "utf8");
const KEY = "ragstream.key";
const sessionStorage = { getItem: () => "rsk_console" };
class ApiFailure extends Error {}
let sent = null;

async function fetch(url, options) {
  sent = { url, method: options.method, body: JSON.parse(options.body) };
  let given = false;
  const read = async () => {
    if (given) return { done: true };
    given = true;
    return { done: false, value: new TextEncoder().encode(sse) };
  };
  return {
    ok: true,
    headers: { get: () => "text/event-stream" },
    body: { getReader: () => ({ read }) },
  };
}

eval(pick("streamQuery") + pick("isRefusal") + `
(async () => {
  const events = [];
  await streamQuery({ query: question }, (name, data) => events.push([name, data]));
  const final = events.filter(([name]) => name === "answer" || name === "error").pop()[1];
  const names = events.map(([name]) => name);
  console.log(JSON.stringify({ sent, events: names, final, refused: isRefusal(final) }));
})();
`);
