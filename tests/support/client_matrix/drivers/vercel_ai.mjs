// Matrix driver: the Vercel AI SDK (`ai`) with one of its providers against the gateway.
//
//   node vercel_ai.mjs --modules DIR --provider openai|anthropic|openai-compatible \
//       --case plain|tool|second --base-url URL --key KEY --model M --work DIR --state FILE
//
// The SDK is ESM and bare `import` specifiers resolve from this file's folder, never from
// NODE_PATH or the cwd, so the packages are loaded from the client's install (`--modules`, its
// node_modules) by path. The plain case uses generateText, the tool case streamText with a
// `read_file` tool and a step limit so the tool's result goes back, the second case streamText
// again from the tool case's messages plus the SDK's accumulated response messages, as an app
// that keeps its chat history does; with the OpenAI provider that turn must have sent
// `item_reference`s (the store is on by default), or the driver fails. Prints {"answer": ...}
// as its last line.

import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { pathToFileURL } from "node:url";

const PROMPTS = {
  plain: "Say hello to the matrix.",
  tool: "Read notes.txt and tell me what it reports.",
  second: "Now say it in one word.",
};
const INSTRUCTIONS = "You are terse.";
// Two model calls in the tool case (the call, then the answer); a bound so a loop cannot run on.
const MAX_STEPS = 4;

const { values: args } = parseArgs({
  options: Object.fromEntries(
    ["modules", "provider", "case", "base-url", "key", "model", "work", "state"].map((name) => [
      name,
      { type: "string" },
    ]),
  ),
  strict: true,
});
for (const [name, value] of Object.entries(args)) {
  if (!value) throw new Error(`--${name} is required`);
}

const resolver = createRequire(join(args.modules, "..", "driver.js"));
const load = (name) => import(pathToFileURL(resolver.resolve(name)).href);
const ai = await load("ai");

function model() {
  const baseURL = `${args["base-url"]}/v1`;
  switch (args.provider) {
    case "openai":
      // The provider's default: the Responses API, `store` left as it comes (true), so a later
      // turn refers to stored items by id (`item_reference`) instead of resending them.
      return load("@ai-sdk/openai").then((m) =>
        m.createOpenAI({ baseURL, apiKey: args.key })(args.model),
      );
    case "anthropic":
      return load("@ai-sdk/anthropic").then((m) =>
        m.createAnthropic({ baseURL, apiKey: args.key })(args.model),
      );
    case "openai-compatible":
      return load("@ai-sdk/openai-compatible").then((m) =>
        m.createOpenAICompatible({ name: "flashbox", baseURL, apiKey: args.key })(args.model),
      );
    default:
      throw new Error(`unknown provider ${args.provider}`);
  }
}

const readFile = ai.tool({
  description: "Read a text file of the working folder.",
  inputSchema: ai.jsonSchema({
    type: "object",
    properties: { path: { type: "string", description: "the file's path, relative" } },
    required: ["path"],
    additionalProperties: false,
  }),
  execute: async ({ path }) => readFileSync(join(args.work, path), "utf8"),
});

const history = args.case === "second" ? JSON.parse(readFileSync(args.state, "utf8")) : [];
const messages = [...history, { role: "user", content: PROMPTS[args.case] }];
const settings = {
  model: await model(),
  instructions: INSTRUCTIONS,
  messages,
  tools: { read_file: readFile },
  stopWhen: ai.isStepCount(MAX_STEPS),
  maxRetries: 0, // a refused request fails the case instead of being sent again
  include: { requestBody: true }, // kept on each step's result (off by default): checked below
};

let answer;
if (args.case === "plain") {
  const result = await ai.generateText(settings);
  answer = result.text;
} else {
  let failure;
  const result = ai.streamText({ ...settings, onError: ({ error }) => (failure = error) });
  for await (const delta of result.textStream) process.stderr.write(delta); // as an app shows it
  if (failure) throw failure;
  answer = await result.text; // the last step's: the answer after the tool's result
  if (args.case === "tool") {
    writeFileSync(args.state, JSON.stringify([...messages, ...(await result.responseMessages)]));
  }
  if (args.case === "second" && args.provider === "openai") {
    // The case exists to show the gateway resolves the ids this provider sends in place of
    // the earlier turn's items: a pin whose provider stopped sending them would pass unseen.
    const { body } = (await result.finalStep).request;
    const sent = typeof body === "string" ? body : JSON.stringify(body);
    if (!sent.includes('"item_reference"')) {
      throw new Error(`the second turn sent no item_reference: ${sent.slice(0, 2000)}`);
    }
  }
}
console.log(JSON.stringify({ answer }));
