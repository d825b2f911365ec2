// Drives a colibri server's Responses API (POST /v1/responses) with the official `openai` npm
// client as an agent does: a whole and a streamed response, a function-tool loop continued with
// previous_response_id and function_call_output, stored responses read and deleted, store: false.
// usage: node responses_test.mjs BASE_URL API_KEY   (prints one JSON line of results)
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 120000 });
const out = {};
const tools = [{ type: 'function', name: 'get_weather', description: 'The weather in a city.',
                 parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
                 strict: false }];
const ask = { model: 'demo', instructions: 'Be brief.', input: 'What is the weather in Paris?', tools,
              max_output_tokens: 6, temperature: 0 };

const whole = await client.responses.create(ask);
out.whole = { id: whole.id, object: whole.object, status: whole.status, text: whole.output_text,
              items: whole.output.map((i) => i.type), usage: whole.usage,
              incomplete: whole.incomplete_details };

// Streamed: the SDK's event parser, and the final response it assembles.
const stream = client.responses.stream(ask);
const events = [];
let text = '';
stream.on('event', (e) => events.push(e.type));
stream.on('response.output_text.delta', (e) => { text += e.delta; });
const final = await stream.finalResponse();
out.stream = { events, text, final_text: final.output_text, status: final.status };

// The tool loop: the model's (here: the client's own) function call answered with its output,
// continuing the stored response.
const loop = await client.responses.create({
  ...ask, previous_response_id: whole.id,
  input: [{ type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call_output', call_id: 'call_1', output: '18 C, sunny' }],
});
out.loop = { status: loop.status, previous: loop.previous_response_id, input_tokens: loop.usage.input_tokens };

// Stored responses: read back, deleted, then gone; store: false keeps nothing.
const got = await client.responses.retrieve(whole.id);
out.retrieved = { id: got.id, text: got.output_text };
const unstored = await client.responses.create({ ...ask, store: false });
for (const [name, call] of [
  ['deleted', () => client.responses.delete(whole.id)],
  ['after_delete', () => client.responses.retrieve(whole.id)],
  ['unstored', () => client.responses.retrieve(unstored.id)],
  ['bad_schema', () => client.responses.create({ ...ask, text: { format: { type: 'json_schema', name: 'x',
                                                                         schema: { type: 'string', pattern: 'a' } } } })],
  ['image', () => client.responses.create({ ...ask, input: [{ role: 'user', content: [
    { type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] }] })],
]) {
  try {
    const r = await call();
    out[name] = { ok: true, deleted: r?.deleted ?? null };
  } catch (e) {
    out[name] = { status: e.status, message: e.error?.message ?? e.message };
  }
}
// A forced call (tool_choice required, then the named function): one function_call item whose
// arguments follow the tool's schema, sampled at temperature 1 on random weights.
for (const [name, choice] of [['forced', 'required'], ['named', { type: 'function', name: 'get_weather' }]]) {
  const r = await client.responses.create({ ...ask, tool_choice: choice, max_output_tokens: 200, temperature: 1 });
  out[name] = { status: r.status, items: r.output.map((i) => i.type),
                calls: r.output.filter((i) => i.type === 'function_call').map((i) => ({ name: i.name, args: i.arguments })) };
}
console.log(JSON.stringify(out));
