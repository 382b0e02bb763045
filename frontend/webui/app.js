/* frontend/webui/app.js: the chat page's logic (index.html), run by the
 * browser. It talks to the server's own OpenAI API, same origin: the model
 * name from GET /v1/models, answers from POST /v1/chat/completions with
 * stream: true, read from fetch's ReadableStream and parsed as Server-Sent
 * Events, so text shows as it is generated. Stop aborts the fetch; the server
 * sees the connection close and cancels the generation.
 * The trade-off: plain DOM calls and textContent only, no framework and no
 * HTML from the model ever parsed, so the page is small, works offline and
 * cannot be scripted by what the model writes; the text is shown raw (no
 * Markdown rendering). */
'use strict';

/* Where the optional API key is kept between visits (servers with --api-key). */
const KEY_STORAGE = 'sluice.api_key';

const byId = (id) => document.getElementById(id);
const ui = {
  model: byId('model'), key: byId('api-key'), newChat: byId('new-chat'), log: byId('log'),
  status: byId('status'), form: byId('composer'), input: byId('input'), send: byId('send'), stop: byId('stop'),
};

/* The conversation as the API takes it. Only answered turns are in it: a
 * question whose answer got no text (an error, or Stop before the first
 * token) is taken back, so two user turns never follow each other (some chat
 * templates refuse that). */
let messages = [];
let modelName = null;       /* from /v1/models; null until known (the server then picks its model) */
let controller = null;      /* AbortController of the generation in flight; null when idle */

/* ================================================================ helpers */

function requestHeaders(withBody) {
  const h = {};
  if (withBody) h['Content-Type'] = 'application/json';
  const key = ui.key.value.trim();
  if (key) h['Authorization'] = 'Bearer ' + key;
  return h;
}

/* The message of a failed response: the OpenAI error body's error.message
 * (what a 401, 429 or 400 from sluice carries), else the status and the
 * start of whatever the body was. */
async function errorText(res) {
  const body = await res.text();
  try {
    const msg = JSON.parse(body).error.message;
    if (msg) return `${res.status}: ${msg}`;
  } catch (_) { /* not OpenAI's shape: fall through */ }
  return `${res.status} ${res.statusText}${body ? ': ' + body.slice(0, 300) : ''}`;
}

function setStatus(text, isError) {
  ui.status.textContent = text;
  ui.status.classList.toggle('error', !!isError);
}

function scrollToEnd() {
  ui.log.scrollTop = ui.log.scrollHeight;
}

/* Appends a message box; returns its parts so a streamed answer can fill them. */
function addMessage(role, text) {
  const box = document.createElement('div');
  box.className = 'msg ' + role;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = role;
  const reasoning = document.createElement('div');
  reasoning.className = 'reasoning';
  const body = document.createElement('div');
  body.className = 'text';
  body.textContent = text;
  const note = document.createElement('div');
  note.className = 'note';
  box.append(who, reasoning, body, note);
  ui.log.append(box);
  scrollToEnd();
  return { box, reasoning, body, note };
}

function setBusy(busy) {
  ui.send.disabled = busy;
  ui.stop.disabled = !busy;
  ui.newChat.disabled = busy;
}

/* ================================================================ model name */

async function loadModel() {
  ui.model.textContent = 'connecting…';
  try {
    const res = await fetch('/v1/models', { headers: requestHeaders(false) });
    if (!res.ok) {
      modelName = null;
      ui.model.textContent = 'model unknown';
      setStatus(await errorText(res), true);
      return;
    }
    const list = await res.json();
    const first = list.data && list.data[0];
    modelName = first ? first.id : null;
    ui.model.textContent = modelName || 'no model';
    if (first && first.max_model_len) ui.model.title = `context: ${first.max_model_len} tokens`;
    setStatus('', false);
  } catch (err) {
    ui.model.textContent = 'server unreachable';
    setStatus(err.message, true);
  }
}

/* ================================================================ SSE */

/* Reads a text/event-stream body and calls onData(data) for each event's
 * data (its data: lines joined by newlines), as the HTML spec's parser does:
 * lines end at LF or CRLF, a blank line ends an event, lines starting with
 * ':' are comments (the server's keep-alive pings). A network chunk may end
 * mid-line or inside a UTF-8 character, so the decoder runs in stream mode
 * and the unfinished line carries over to the next chunk. onData returns
 * true to stop reading ([DONE]). */
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let pending = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += decoder.decode(value, { stream: true });
    const lines = pending.split(/\r?\n/);
    pending = lines.pop();
    for (const line of lines) {
      if (line === '') {
        if (data.length && onData(data.join('\n'))) {
          await reader.cancel();
          return;
        }
        data = [];
      } else if (line.startsWith('data:')) {
        data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
      }
      /* comments and other fields (event:, id:, retry:) carry nothing for us */
    }
  }
}

/* ================================================================ one turn */

async function ask(question) {
  messages.push({ role: 'user', content: question });
  const asked = addMessage('user', question);
  const out = addMessage('assistant', '');
  out.box.classList.add('streaming');
  controller = new AbortController();
  setBusy(true);
  setStatus('generating…', false);
  let answer = '';
  let finish = null;
  let failure = null;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST',
      headers: requestHeaders(true),
      body: JSON.stringify({ model: modelName || undefined, messages, stream: true }),
      signal: controller.signal,
    });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res.body, (data) => {
      if (data === '[DONE]') return true;
      const chunk = JSON.parse(data);
      /* After streaming has begun, a failure arrives as a final error event. */
      if (chunk.error) throw new Error(chunk.error.message || 'the server ended the stream with an error');
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return false;   /* the usage-only chunk */
      const delta = choice.delta || {};
      if (delta.reasoning_content) out.reasoning.textContent += delta.reasoning_content;
      if (delta.content) {
        answer += delta.content;
        out.body.textContent = answer;
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      scrollToEnd();
      return false;
    });
  } catch (err) {
    failure = err;
  }
  controller = null;
  out.box.classList.remove('streaming');
  const stopped = failure && failure.name === 'AbortError';
  if (answer === '') {
    /* Nothing came back: take the question back and leave it in the box. */
    messages.pop();
    asked.box.remove();
    out.box.remove();
    if (ui.input.value === '') ui.input.value = question;
  } else {
    messages.push({ role: 'assistant', content: answer });
    if (stopped) out.note.textContent = 'stopped';
    else if (finish === 'length') out.note.textContent = 'cut off: the token limit was reached';
  }
  if (stopped) {
    out.box.classList.add('stopped');
    setStatus(answer === '' ? 'stopped before the answer began' : 'stopped', false);
  } else if (failure) {
    addMessage('error', failure.message);
    setStatus('the request failed', true);
  } else {
    setStatus('', false);
  }
  setBusy(false);
  ui.input.focus();
}

/* ================================================================ events */

ui.form.addEventListener('submit', (ev) => {
  ev.preventDefault();   /* the page never navigates: its CSP has form-action 'none' */
  const question = ui.input.value.trim();
  if (question === '' || controller) return;
  ui.input.value = '';
  ask(question);
});

/* Enter sends, Shift+Enter is a new line (and Enter while an IME composes is the IME's). */
ui.input.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.form.requestSubmit();
  }
});

ui.stop.addEventListener('click', () => {
  if (controller) controller.abort();
});

ui.newChat.addEventListener('click', () => {
  messages = [];
  ui.log.replaceChildren();
  setStatus('', false);
  ui.input.focus();
});

/* The key is kept in this browser's localStorage for the next visit; a new
 * key may open /v1/models, so the model name is asked for again. */
ui.key.addEventListener('change', () => {
  const key = ui.key.value.trim();
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
  loadModel();
});

ui.key.value = localStorage.getItem(KEY_STORAGE) || '';
loadModel();
ui.input.focus();
