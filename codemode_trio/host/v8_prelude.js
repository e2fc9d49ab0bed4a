// The JavaScript side of a cell: evaluated once in each fresh V8 isolate, before the cell.
//
// It turns the isolate's global object into the one the reference host gives a cell, and
// speaks to Python (codemode_trio/host/v8.py) through an ArrayBuffer whose memory Python
// reads and writes directly: a message is written there as UTF-16 and one of two
// argument-less native callbacks is called. Python must never read V8 values while a script
// runs (the isolate is busy running the caller), so nothing travels as a callback argument.
//   * push(): a message for Python (output, tool calls, timers...); returns at once, so
//     output reaches the host even while the script then loops forever;
//   * sync(): a request (load, notify) whose answer Python writes back before the call
//     returns.
// Everything lives in this script's lexical scope: nothing of it is a property of globalThis.
"use strict";

const __codemode = (() => {
  const g = globalThis;
  const push = g.__codemode_push;
  const sync = g.__codemode_sync;
  delete g.__codemode_push;
  delete g.__codemode_sync;
  // What V8 adds beyond ECMAScript, and what the reference host does not offer.
  for (const name of ["console", "SharedArrayBuffer", "Atomics", "WebAssembly", "Temporal"]) {
    delete g[name];
  }
  delete Date.prototype.toTemporalInstant; // Temporal's, gone with it

  // Captured now, so that a script replacing them cannot break the bridge.
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const fromCharCode = String.fromCharCode;
  const defineProperty = Object.defineProperty;
  const captureStackTrace = Error.captureStackTrace;
  const PromiseCtor = Promise;
  const MapCtor = Map;
  const iteratorSymbol = Symbol.iterator;

  // ------------------------------------------------------------------ ES2026 built-ins
  // The reference host's V8 has Math.sumPrecise and Iterator.concat; mini-racer's V8 14.4
  // lacks them (and has no flag for them), so they are supplied here.

  function describe(value) {
    if (typeof value === "function") return "function";
    if (value !== null && typeof value === "object") {
      const ctor = value.constructor;
      return `#<${typeof ctor === "function" && ctor.name ? ctor.name : "Object"}>`;
    }
    return Object.prototype.toString.call(value);
  }

  // A TypeError whose stack reads as one thrown by a V8 builtin called from the script.
  function builtinError(message, callee, frame) {
    const error = new TypeError(message);
    captureStackTrace(error, callee);
    const stack = error.stack;
    const lineEnd = stack.indexOf("\n");
    if (lineEnd >= 0) {
      defineProperty(error, "stack", {
        value: `${stack.slice(0, lineEnd)}\n    at ${frame} (<anonymous>)${stack.slice(lineEnd)}`,
        writable: true,
        configurable: true,
      });
    }
    return error;
  }

  function builtin(impl, name, length) {
    const bound = impl.bind(undefined);
    defineProperty(bound, "name", { value: name });
    defineProperty(bound, "length", { value: length });
    return bound;
  }
  function installBuiltin(target, name, impl) {
    defineProperty(target, name, { value: impl, writable: true, configurable: true });
  }

  const float = new DataView(new ArrayBuffer(8));
  // A finite double as an exact integer count of 2^-1074, the smallest subnormal.
  function scaled(x) {
    float.setFloat64(0, x);
    const high = float.getUint32(0);
    const exponent = (high >>> 20) & 0x7ff;
    let mantissa = (BigInt(high & 0xfffff) << 32n) | BigInt(float.getUint32(4));
    if (exponent !== 0) mantissa = (mantissa | (1n << 52n)) << BigInt(exponent - 1);
    return high >>> 31 ? -mantissa : mantissa;
  }
  // The double nearest to n * 2^-1074 (ties to even).
  function unscaled(n) {
    const negative = n < 0n;
    let magnitude = negative ? -n : n;
    let shift = magnitude.toString(2).length - 53;
    if (shift > 0) {
      const rest = magnitude & ((1n << BigInt(shift)) - 1n);
      const half = 1n << BigInt(shift - 1);
      magnitude >>= BigInt(shift);
      if (rest > half || (rest === half && (magnitude & 1n) === 1n)) magnitude += 1n;
    } else {
      shift = 0;
    }
    // magnitude <= 2^53 and the scale 2^(shift - 1074) is applied in two representable
    // halves: the first product is exact, the second only overflows if the sum does.
    const exponent = shift - 1074;
    const first = Math.trunc(exponent / 2);
    const value = Number(magnitude) * 2 ** first * 2 ** (exponent - first);
    return negative ? -value : value;
  }

  function sumPrecise(items) {
    if (items === undefined || items === null) {
      throw builtinError("Math.sumPrecise called on null or undefined", sumPrecise, "Math.sumPrecise");
    }
    const method = items[iteratorSymbol];
    if (typeof method !== "function") {
      throw builtinError(`${describe(items)} is not iterable`, sumPrecise, "Math.sumPrecise");
    }
    const iterator = method.call(items);
    let state = "minus-zero";
    let sum = 0n;
    for (;;) {
      const step = iterator.next();
      if (step.done) break;
      const value = step.value;
      if (typeof value !== "number") {
        if (typeof iterator.return === "function") iterator.return();
        throw builtinError(
          `Type of 'Iterator value' must be 'number', found '${typeof value}'`,
          sumPrecise,
          "Math.sumPrecise",
        );
      }
      if (state === "nan") continue;
      if (value !== value) state = "nan";
      else if (value === Infinity) state = state === "minus-infinity" ? "nan" : "plus-infinity";
      else if (value === -Infinity) state = state === "plus-infinity" ? "nan" : "minus-infinity";
      else if (!(value === 0 && 1 / value < 0) && (state === "minus-zero" || state === "finite")) {
        state = "finite";
        sum += scaled(value);
      }
    }
    if (state === "nan") return NaN;
    if (state === "plus-infinity") return Infinity;
    if (state === "minus-infinity") return -Infinity;
    if (state === "minus-zero") return -0;
    return unscaled(sum);
  }
  installBuiltin(Math, "sumPrecise", builtin(sumPrecise, "sumPrecise", 1));

  const flatMap = Iterator.prototype.flatMap;
  const arrayValues = Array.prototype.values;
  function concat(...items) {
    const sources = [];
    for (const item of items) {
      if (item === null || (typeof item !== "object" && typeof item !== "function")) {
        throw builtinError("Iterator.concat called on non-object", concat, "Iterator.concat");
      }
      const method = item[iteratorSymbol];
      if (method === undefined) {
        throw builtinError(`${describe(item)} is not iterable`, concat, "Iterator.concat");
      }
      sources.push({ [iteratorSymbol]: () => method.call(item) });
    }
    // flatMap makes the same kind of object the real one returns: an Iterator Helper.
    return flatMap.call(arrayValues.call(sources), (source) => source);
  }
  installBuiltin(Iterator, "concat", builtin(concat, "concat", 0));

  // ------------------------------------------------------------------ Python channel

  // Layout: [u32 length in UTF-16 units][u32 flags][units ...]. A text longer than the
  // buffer travels in chunks, each flagged MORE while more follows.
  const CHANNEL_BYTES = 256 * 1024;
  const channel = new ArrayBuffer(CHANNEL_BYTES);
  const header = new Uint32Array(channel, 0, 2);
  const units = new Uint16Array(channel, 8);
  const MORE = 1;

  function send(text, native) {
    let at = 0;
    do {
      const n = Math.min(units.length, text.length - at);
      for (let i = 0; i < n; i++) units[i] = text.charCodeAt(at + i);
      at += n;
      header[0] = n;
      header[1] = at < text.length ? MORE : 0;
      native();
    } while (at < text.length);
  }
  function readChunk() {
    const n = header[0];
    let out = "";
    for (let i = 0; i < n; i += 8192) {
      out += fromCharCode.apply(null, units.subarray(i, Math.min(n, i + 8192)));
    }
    return out;
  }
  function post(message) {
    send(stringify(message), push);
  }
  // Sends `request` and returns Python's answer, which may also come in chunks.
  function call(request) {
    send(request, sync);
    let answer = readChunk();
    while (header[1] & MORE) {
      header[0] = 0;
      header[1] = 0;
      sync();
      answer += readChunk();
    }
    return answer;
  }

  // ------------------------------------------------------------------ errors

  const EXIT = { exit: true };

  // The body shares line 1 with the wrapper Python puts before it (see v8.py): its length.
  let wrapperLength = 0;
  const PRELUDE_FRAME = /\n    at [^\n]*codemode_prelude\.js[^\n]*/g;
  const LINE_ONE = /exec_main\.mjs:1:(\d+)/g;

  // A V8 stack as the reference host shows it: without this prelude's frames, and with the
  // positions on line 1 those of the body itself.
  function hostStack(stack) {
    return stack
      .replace(PRELUDE_FRAME, "")
      .replace(LINE_ONE, (_, column) => `exec_main.mjs:1:${Math.max(1, column - wrapperLength)}`);
  }

  // The text the reference host reports for a thrown value: an error's stack, or the value
  // itself as a string (a thrown string verbatim).
  function errorText(value) {
    try {
      if (value !== null && (typeof value === "object" || typeof value === "function")) {
        const stack = value.stack;
        if (typeof stack === "string") return hostStack(stack);
      }
      return String(value);
    } catch (_) {
      return "[object Object]";
    }
  }

  // The reference host reports a failure inside one of its functions as a string holding
  // V8's error text, with the stack starting at the script's call site.
  function rethrowFrom(error, callee) {
    if (error !== null && typeof error === "object") {
      try {
        captureStackTrace(error, callee);
      } catch (_) {
        // A frozen error keeps the stack it has.
      }
    }
    throw errorText(error);
  }

  const FUNCTION_VALUE = "failed to serialize JavaScript value: expected value at line 1 column 1";

  // The reference host parses that JSON text again (serde_json), whose recursion limit is
  // 128 nested arrays and objects: a deeper value fails with its error, at the 128th opening
  // bracket, its column counted in UTF-8 bytes.
  const MAX_DEPTH = 128;
  function utf8Length(text, end) {
    let bytes = 0;
    for (let i = 0; i < end; i++) {
      const unit = text.charCodeAt(i);
      if (unit < 0x80) bytes += 1;
      else if (unit < 0x800) bytes += 2;
      else if (unit >= 0xd800 && unit < 0xdc00 && i + 1 < end) {
        bytes += 4; // a surrogate pair (JSON.stringify escapes a lone one)
        i++;
      } else bytes += 3;
    }
    return bytes;
  }
  function depthError(json) {
    let depth = 0;
    const n = json.length;
    for (let i = 0; i < n; i++) {
      const unit = json.charCodeAt(i);
      if (unit === 34) {
        // A string, to its closing quote: one not escaped by an odd run of backslashes.
        for (;;) {
          i = json.indexOf('"', i + 1);
          if (i < 0) return undefined;
          let before = i - 1;
          while (json.charCodeAt(before) === 92) before--;
          if ((i - 1 - before) % 2 === 0) break;
        }
      } else if (unit === 91 || unit === 123) {
        if (++depth === MAX_DEPTH) {
          return `failed to serialize JavaScript value: recursion limit exceeded at line 1 column ${utf8Length(json, i + 1)}`;
        }
      } else if (unit === 93 || unit === 125) {
        depth--;
      }
    }
    return undefined;
  }

  // JSON text of a value as the host serialises it (JSON.stringify semantics).
  function toJson(value, callee) {
    let json;
    try {
      json = stringify(value);
    } catch (error) {
      rethrowFrom(error, callee);
    }
    if (json === undefined) throw FUNCTION_VALUE;
    // Fewer characters than that cannot nest so deep.
    if (json.length >= MAX_DEPTH) {
      const error = depthError(json);
      if (error !== undefined) throw error;
    }
    return json;
  }

  // Host functions look like the reference host's native ones: `String(text)` is
  // "function () { [native code] }", the name is empty, and there is a `prototype`.
  function hostFunction(impl) {
    const bound = impl.bind(undefined);
    defineProperty(bound, "name", { value: "" });
    const prototype = {};
    defineProperty(prototype, "constructor", { value: bound, writable: true, configurable: true });
    defineProperty(bound, "prototype", { value: prototype, writable: true });
    return bound;
  }

  // ------------------------------------------------------------------ output

  function textOf(value, callee) {
    switch (typeof value) {
      case "string":
        return value;
      case "undefined":
      case "function":
      case "symbol":
        return "undefined";
      case "object": {
        let json;
        try {
          json = stringify(value);
        } catch (error) {
          rethrowFrom(error, callee);
        }
        return json === undefined ? "undefined" : json;
      }
      default:
        return String(value);
    }
  }

  function text(...args) {
    post(["emit", { type: "input_text", text: textOf(args[0], text) }]);
  }

  const IMAGE_USAGE =
    "image expects a non-empty image URL string, an object with image_url and optional detail, or a raw MCP image block";
  const AUDIO_USAGE =
    "audio expects a non-empty audio URL string, an object with audio_url, or a raw MCP audio block";
  const DETAILS = ["auto", "low", "high", "original"];

  function isObject(value) {
    return value !== null && typeof value === "object";
  }
  function blockUri(block) {
    const mime = typeof block.mimeType === "string" && block.mimeType !== ""
      ? block.mimeType
      : "application/octet-stream";
    return `data:${mime};base64,${block.data}`;
  }
  function dataUri(block, what) {
    if (typeof block.data !== "string" || block.data === "") throw `${what} expected MCP ${what} data`;
    return blockUri(block);
  }
  function isDataUri(url) {
    return url.slice(0, 5).toLowerCase() === "data:";
  }
  function isRemote(url) {
    return /^https?:/i.test(url);
  }
  function imageDetail(detail) {
    if (detail === undefined || detail === null) return "high";
    if (typeof detail !== "string") throw "image detail must be a string when provided";
    const lower = detail.toLowerCase();
    if (!DETAILS.includes(lower)) throw "image detail must be one of: auto, low, high, original";
    return lower;
  }
  // image(url | {image_url, detail?} | MCP block, detail?): the second argument wins over
  // an object's detail; an MCP block's own detail is ignored.
  function imageItem(value, detail) {
    let url;
    if (typeof value === "string") {
      url = value;
    } else if (isObject(value) && value.type === "image") {
      url = dataUri(value, "image");
    } else if (isObject(value) && "image_url" in value) {
      url = value.image_url;
      detail = detail ?? value.detail;
    } else if (isObject(value) && typeof value.type === "string") {
      throw `image only accepts MCP image blocks, got ${stringify(value.type)}`;
    } else {
      throw IMAGE_USAGE;
    }
    if (typeof url !== "string" || url === "") throw IMAGE_USAGE;
    if (!isDataUri(url)) {
      throw isRemote(url)
        ? "Tool call failed: remote image URLs are not supported in tool outputs. Pass a base64 data URI instead"
        : "Tool call failed: invalid image output. Pass a base64 data URI instead";
    }
    return { type: "input_image", image_url: url, detail: imageDetail(detail) };
  }
  function audioItem(value) {
    let url;
    if (typeof value === "string") {
      url = value;
    } else if (isObject(value) && value.type === "audio") {
      url = dataUri(value, "audio");
    } else if (isObject(value) && "audio_url" in value) {
      url = value.audio_url;
    } else if (isObject(value) && typeof value.type === "string") {
      throw `audio only accepts MCP audio blocks, got ${stringify(value.type)}`;
    } else {
      throw AUDIO_USAGE;
    }
    if (typeof url !== "string" || url === "") throw AUDIO_USAGE;
    if (!isDataUri(url)) {
      throw "Tool call failed: invalid audio output. Pass a base64 data URI instead";
    }
    return { type: "input_audio", audio_url: url };
  }

  function image(...args) {
    post(["emit", imageItem(args[0], args[1])]);
  }
  function audio(...args) {
    post(["emit", audioItem(args[0])]);
  }
  function generatedImage(...args) {
    if (!isObject(args[0])) throw "generatedImage expects an image generation result object";
    post(["emit", imageItem(args[0], undefined)]);
  }

  const CONTENT_USAGE = "content expects one MCP ContentBlock";
  function contentItem(block) {
    if (!isObject(block)) throw CONTENT_USAGE;
    if (block.type === "text") {
      if (typeof block.text !== "string") throw CONTENT_USAGE;
      return { type: "input_text", text: block.text };
    }
    // An MCP block as it is: its data unchecked, any detail ignored.
    if (block.type === "image" && typeof block.data === "string") {
      return { type: "input_image", image_url: blockUri(block), detail: "high" };
    }
    if (block.type === "audio" && typeof block.data === "string") {
      return { type: "input_audio", audio_url: blockUri(block) };
    }
    throw CONTENT_USAGE;
  }
  function content(...args) {
    const value = args[0];
    if (isObject(value) && typeof value.type !== "string" && typeof value[iteratorSymbol] === "function") {
      // Each block is emitted as it is read: a bad one fails the call after the good ones.
      for (const block of value) post(["emit", contentItem(block)]);
      return;
    }
    post(["emit", contentItem(value)]);
  }

  // ------------------------------------------------------------------ control

  function notify(...args) {
    // Converted as text() converts; blank text is refused.
    const message = textOf(args[0], notify);
    if (message.trim() === "") throw "notify expects non-empty text";
    // Synchronous, so that a refusal (too many pending delegate calls) is thrown here; the
    // delivery itself is not waited for.
    const answer = parse(call(stringify(["notify", message])));
    if (answer.error !== undefined) throw answer.error;
  }
  function yield_control() {
    post(["yield"]);
  }
  function exit() {
    post(["exit"]);
    throw EXIT;
  }

  // ------------------------------------------------------------------ store

  function storeKey(key, what) {
    if (typeof key === "symbol") throw `${what} key must be a string`;
    return String(key);
  }
  function store(...args) {
    const key = storeKey(args[0], "store");
    const value = args[1];
    if (value === undefined) {
      throw `Unable to store ${stringify(key)}. Only plain serializable objects can be stored.`;
    }
    post(["store", key, toJson(value, store)]);
  }
  function load(...args) {
    const answer = parse(call(stringify(["load", storeKey(args[0], "load")])));
    if (answer.error !== undefined) throw answer.error;
    return answer.missing ? undefined : parse(answer.value);
  }

  // ------------------------------------------------------------------ timers

  const timers = new MapCtor();
  let lastTimer = 0;
  function setTimeout(...args) {
    const callback = args[0];
    if (typeof callback !== "function") throw "setTimeout expects a function callback";
    // ToNumber (a BigInt or a Symbol throws, as from a native function: no frame of ours);
    // NaN, an infinity or a negative delay is none.
    const kind = typeof args[1];
    if (kind === "bigint" || kind === "symbol") {
      const error = new TypeError(`Cannot convert a ${kind === "bigint" ? "BigInt" : "Symbol"} value to a number`);
      captureStackTrace(error, setTimeout);
      throw error;
    }
    const delay = +args[1];
    const id = ++lastTimer;
    timers.set(id, callback);
    // Sent to Python in one message per batch, from a promise job queued by the first: a
    // script setting many timers in a loop costs one crossing, not one per timer. No timer
    // can fire before the script yields anyway; the time it ran on is taken off each delay.
    const at = newTimers.length;
    if (at === 0) PromiseCtor.resolve().then(flushTimers);
    newTimers[at] = id;
    newTimers[at + 1] = delay > 0 && delay < Infinity ? delay : 0;
    newTimers[at + 2] = dateNow();
    return id;
  }
  const dateNow = Date.now;
  let newTimers = [];
  function flushTimers() {
    const batch = newTimers;
    newTimers = [];
    const now = dateNow();
    const pairs = [];
    for (let i = 0; i < batch.length; i += 3) {
      pairs[pairs.length] = batch[i];
      const left = batch[i + 1] - (now - batch[i + 2]);
      pairs[pairs.length] = left > 0 ? left : 0;
    }
    post(["timers", pairs]);
  }
  function clearTimeout(...args) {
    timers.delete(args[0]);
  }
  function fire(id) {
    const callback = timers.get(id);
    if (callback !== undefined && !finished) {
      timers.delete(id);
      // From a promise job, as start() does; a throw fails the cell.
      PromiseCtor.resolve().then(callback).then(undefined, finish);
    }
  }

  // ------------------------------------------------------------------ settled helpers

  function settledEntries(promises) {
    const keyed = promises instanceof MapCtor;
    const entries = [];
    let position = 0;
    for (const entry of promises) {
      entries.push(keyed ? [entry[0], entry[1]] : [position++, entry]);
    }
    return entries;
  }
  function settleOne(index, promise) {
    return PromiseCtor.resolve(promise).then(
      (value) => ({ index, status: "fulfilled", value }),
      (reason) => ({ index, status: "rejected", reason }),
    );
  }
  // Yields {index, status, value | reason} for each promise, in the order they settle. The
  // promises are taken at the call (a non-iterable throws there), as the reference host does.
  function as_settled(promises) {
    const entries = settledEntries(promises);
    const ready = [];
    let wakeUp;
    for (const [index, promise] of entries) {
      settleOne(index, promise).then((result) => {
        ready.push(result);
        if (wakeUp !== undefined) {
          const resume = wakeUp;
          wakeUp = undefined;
          resume();
        }
      });
    }
    return (async function* settled() {
      for (let delivered = 0; delivered < entries.length; delivered++) {
        if (ready.length === 0) await new PromiseCtor((resolve) => (wakeUp = resolve));
        yield ready.shift();
      }
    })();
  }
  // Calls `callback(result)` for each promise as it settles; resolves when all have.
  async function stream_settled(promises, callback) {
    if (typeof callback !== "function") throw new TypeError("stream_settled requires a callback");
    for await (const result of as_settled(promises)) await callback(result);
  }

  // ------------------------------------------------------------------ tools

  const calls = new MapCtor();
  let lastCall = 0;
  function bindTool(binding) {
    function tool(...args) {
      const input = args.length === 0 || args[0] === undefined ? "null" : toJson(args[0], tool);
      const id = ++lastCall;
      post(["call", id, binding, input]);
      return new PromiseCtor((resolve, reject) => calls.set(id, { resolve, reject }));
    }
    return hostFunction(tool);
  }
  function settle(id, ok, payload) {
    const pending = calls.get(id);
    if (pending !== undefined) {
      calls.delete(id);
      if (ok) pending.resolve(parse(payload));
      else pending.reject(payload);
    }
  }

  // ------------------------------------------------------------------ import

  // What import(...) and import.meta of the script became (see dynamic_import.py). The
  // reference host's loader refuses every module with a string, once V8 has converted the
  // specifier and checked the options as import() does, each failure a rejection.
  const IMPORT_REFUSED = "unsupported import in exec";
  const objectKeys = Object.keys;
  function importError(message) {
    const error = new TypeError(message);
    captureStackTrace(error, dynamicImport);
    return error;
  }
  function isObjectOrFunction(value) {
    return typeof value === "function" || isObject(value);
  }
  function importOptionsError(options) {
    if (options === undefined) return undefined;
    if (!isObjectOrFunction(options)) {
      return importError("The second argument to import() must be an object");
    }
    const attributes = options.with;
    if (attributes === undefined) return undefined;
    if (!isObjectOrFunction(attributes)) return importError("The 'with' option must be an object");
    for (const key of objectKeys(attributes)) {
      if (typeof attributes[key] !== "string") {
        return importError("Import attribute value must be a string");
      }
    }
    return undefined;
  }
  function dynamicImport(specifier, options) {
    try {
      if (typeof specifier === "symbol") {
        return PromiseCtor.reject(importError("Cannot convert a Symbol value to a string"));
      }
      `${specifier}`; // ToString, which may run the script's own toString()
      const error = importOptionsError(options);
      return PromiseCtor.reject(error === undefined ? IMPORT_REFUSED : error);
    } catch (error) {
      return PromiseCtor.reject(error);
    }
  }
  // import.meta: one object per cell (a module), empty and without a prototype.
  defineProperty(dynamicImport, "meta", { value: Object.create(null) });

  // ------------------------------------------------------------------ the cell

  let finished = false;
  function succeed() {
    if (finished) return;
    finished = true;
    post(["done"]);
  }
  function finish(error) {
    if (finished) return;
    finished = true;
    if (error === EXIT) return; // exit() already queued its message
    post(["error", errorText(error)]);
  }

  function install(toolList) {
    const toolsObject = {};
    const allTools = [];
    // Every tool is listed; a binding shared by several names calls the last of them.
    for (const [binding, description] of toolList) {
      allTools.push({ name: binding, description });
      toolsObject[binding] = bindTool(binding);
    }
    const globals = {
      tools: toolsObject,
      ALL_TOOLS: allTools,
      text: hostFunction(text),
      content: hostFunction(content),
      image: hostFunction(image),
      audio: hostFunction(audio),
      generatedImage: hostFunction(generatedImage),
      store: hostFunction(store),
      load: hostFunction(load),
      notify: hostFunction(notify),
      yield_control: hostFunction(yield_control),
      exit: hostFunction(exit),
      setTimeout: hostFunction(setTimeout),
      clearTimeout: hostFunction(clearTimeout),
      as_settled,
      stream_settled,
    };
    for (const name of Object.keys(globals)) {
      defineProperty(g, name, { value: globals[name], writable: true, enumerable: true, configurable: true });
    }
  }

  // `wrapper` takes what import() was rewritten to and returns the cell's body compiled as
  // an async function (see v8.py). The body is called from a promise job, so that its stack
  // traces hold the script's frames only.
  function start(wrapper) {
    if (finished) return; // run() already failed the cell
    PromiseCtor.resolve().then(wrapper(dynamicImport)).then(succeed, finish);
  }

  // Compiles (without running) the body with its import() calls as written (and import.meta
  // as a value that cannot be assigned), for the syntax errors V8 finds there as in a module:
  // `import()`, `new import(x)`, three arguments, `import.meta = 1`...
  function checkImports(checkSource) {
    try {
      (0, eval)(`"use strict";(async function () {\n${checkSource}\n})`);
    } catch (error) {
      if (!(error instanceof SyntaxError)) throw error;
      finished = true;
      post(["syntax", String(error)]);
    }
  }

  // The reference host compiles the cell as a module, where a top-level `return` is a
  // SyntaxError. Here the body is a function's, so that case is found by compiling the
  // source (without running it) as a class static block, where `return` is illegal too.
  function hasTopLevelReturn(source) {
    if (!/\breturn\b/.test(source)) return false;
    try {
      (0, eval)(`(function () { class C { static {\n${source}\n} } })`);
    } catch (error) {
      return error instanceof SyntaxError && error.message === "Illegal return statement";
    }
    return false;
  }

  // Installs the cell's globals; Python then evaluates the wrapped body, which calls start().
  function run(toolList, source, prefixLength, checkSource) {
    wrapperLength = prefixLength;
    install(toolList);
    if (checkSource !== null) checkImports(checkSource);
    if (hasTopLevelReturn(source)) finish("SyntaxError: Illegal return statement");
  }

  return { run, start, fire, settle, channel };
})();
