// The JavaScript side of a cell: evaluated once in each fresh V8 isolate, before the cell.
//
// This script is an expression: a function that Python (codemode_trio/host/v8_engine.py) calls
// once, with an argument-less native callback as `this`, and that returns [dispatch, channel].
// Nothing of it is bound in the global scope or is a property of any object a cell can reach,
// so the cell's code has no way to the channel, the callback or any function below.
//
// It turns the isolate's global object into the one the reference host gives a cell, and
// speaks to Python through `channel`, a SharedArrayBuffer whose memory Python reads and writes
// directly: a message is written there as UTF-16 and the callback is called. Python must never
// read V8 values while a script runs (the isolate is busy running the caller), so nothing
// travels as a callback argument. The header's flags tell Python what the call is:
//   * a message (output, tool calls, timers...): Python takes it and returns at once, so
//     output reaches the host even while the script then loops forever;
//   * flagged SYNC, a request (load, notify) whose answer Python writes back before the call
//     returns.
// Python in turn calls dispatch() with a JSON text as `this` (run, settle, fire), or with the
// cell's compiled wrapper function (start).
//
// The cell's code runs in the same realm and may replace any built-in. So every built-in this
// file uses while the cell runs is captured below, before any of the cell's code exists, and
// called uncurried: nothing here looks a method up on an object or prototype the cell can
// reach. Messages are assembled from JSON.stringify of strings and numbers only (for an object
// or array, stringify would look up its toJSON), our arrays grow by defineProperty (a plain
// `array[i] = x` would meet a setter the cell put on Array.prototype), and our own promises
// carry an own `constructor` so that then() never consults Promise.prototype.
"use strict";

(function () {
  const native = this;
  const g = globalThis;

  // ------------------------------------------------------------------ captured built-ins

  const FunctionPrototype = Function.prototype;
  // uncurry(method)(self, ...args) calls method with `self` as this, looking nothing up.
  const uncurry = FunctionPrototype.bind.bind(FunctionPrototype.call);
  const call = uncurry(FunctionPrototype.call);
  const bind = uncurry(FunctionPrototype.bind);
  const hasInstance = uncurry(FunctionPrototype[Symbol.hasInstance]);
  const reflectApply = Reflect.apply;
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const StringCtor = String;
  const NumberCtor = Number;
  const BigIntCtor = BigInt;
  const TypeErrorCtor = TypeError;
  const SyntaxErrorCtor = SyntaxError;
  const Uint16ArrayCtor = Uint16Array;
  const fromCharCode = String.fromCharCode;
  const charCodeAt = uncurry(String.prototype.charCodeAt);
  const stringSlice = uncurry(String.prototype.slice);
  const stringIndexOf = uncurry(String.prototype.indexOf);
  const startsWith = uncurry(String.prototype.startsWith);
  const toLowerCase = uncurry(String.prototype.toLowerCase);
  const stringTrim = uncurry(String.prototype.trim);
  const bigintToString = uncurry(BigInt.prototype.toString);
  const objectToString = uncurry(Object.prototype.toString);
  const defineProperty = Object.defineProperty;
  const objectKeys = Object.keys;
  const objectCreate = Object.create;
  const arrayShift = uncurry(Array.prototype.shift);
  const captureStackTrace = Error.captureStackTrace;
  const mathMin = Math.min;
  const mathTrunc = Math.trunc;
  const getUint32 = uncurry(DataView.prototype.getUint32);
  const setFloat64 = uncurry(DataView.prototype.setFloat64);
  const PromiseCtor = Promise;
  const promiseResolve = bind(Promise.resolve, Promise);
  const promiseReject = bind(Promise.reject, Promise);
  const promiseThen = uncurry(Promise.prototype.then);
  const MapCtor = Map;
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapDelete = uncurry(Map.prototype.delete);
  const iteratorSymbol = Symbol.iterator;
  const asyncGeneratorNext = uncurry(Object.getPrototypeOf(async function* () {}).prototype.next);
  const indirectEval = g.eval;
  const dateNow = Date.now;

  // Property descriptors have no prototype: defineProperty reads `get`, `set`... from them,
  // and would otherwise find getters the cell put on Object.prototype.
  // Adds `value` at the end of one of our arrays as an own property.
  function append(array, value) {
    defineProperty(array, array.length, {
      __proto__: null,
      value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  // An argument of a rest list, without reading a hole through Array.prototype.
  function arg(args, index) {
    return index < args.length ? args[index] : undefined;
  }
  // One of our promises, made so that then() and await find its constructor as an own
  // property: `undefined` makes then() use %Promise% itself (no species lookup).
  function own(promise, ctor) {
    defineProperty(promise, "constructor", { __proto__: null, value: ctor });
    return promise;
  }
  function resolved() {
    return own(promiseResolve(undefined), undefined);
  }
  function then(promise, onFulfilled, onRejected) {
    return own(promiseThen(promise, onFulfilled, onRejected), undefined);
  }

  // ------------------------------------------------------------------ the channel

  // Layout: [u32 length in UTF-16 units][u32 flags][units ...]. A text longer than the
  // buffer travels in chunks, each flagged MORE while more follows; each chunk of a request is
  // flagged SYNC. Shared, so that it can be neither detached nor transferred; fixed-size, so
  // that it cannot shrink under Python.
  const CHANNEL_BYTES = 256 * 1024;
  const UNITS = (CHANNEL_BYTES - 8) / 2;
  const channel = new SharedArrayBuffer(CHANNEL_BYTES);
  const header = new Uint32Array(channel, 0, 2);
  const units = new Uint16ArrayCtor(channel, 8, UNITS);
  const MORE = 1;
  const SYNC = 2;

  // What V8 adds beyond ECMAScript, and what the reference host does not offer.
  for (const name of ["console", "SharedArrayBuffer", "Atomics", "WebAssembly", "Temporal"]) {
    delete g[name];
  }
  delete Date.prototype.toTemporalInstant; // Temporal's, gone with it

  // ------------------------------------------------------------------ ES2026 built-ins
  // The reference host's V8 has Math.sumPrecise and Iterator.concat; mini-racer's V8 14.4
  // lacks them (and has no flag for them), so they are supplied here.

  function describe(value) {
    if (typeof value === "function") return "function";
    if (value !== null && typeof value === "object") {
      const ctor = value.constructor;
      return `#<${typeof ctor === "function" && ctor.name ? ctor.name : "Object"}>`;
    }
    return objectToString(value);
  }

  // A TypeError whose stack reads as one thrown by a V8 builtin called from the script.
  function builtinError(message, callee, frame) {
    const error = new TypeErrorCtor(message);
    captureStackTrace(error, callee);
    const stack = error.stack;
    const lineEnd = typeof stack === "string" ? stringIndexOf(stack, "\n") : -1;
    if (lineEnd >= 0) {
      defineProperty(error, "stack", {
        __proto__: null,
        value: `${stringSlice(stack, 0, lineEnd)}\n    at ${frame} (<anonymous>)${stringSlice(stack, lineEnd)}`,
        writable: true,
        configurable: true,
      });
    }
    return error;
  }

  function builtin(impl, name, length) {
    const bound = bind(impl, undefined);
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
    setFloat64(float, 0, x);
    const high = getUint32(float, 0);
    const exponent = (high >>> 20) & 0x7ff;
    let mantissa = (BigIntCtor(high & 0xfffff) << 32n) | BigIntCtor(getUint32(float, 4));
    if (exponent !== 0) mantissa = (mantissa | (1n << 52n)) << BigIntCtor(exponent - 1);
    return high >>> 31 ? -mantissa : mantissa;
  }
  // The double nearest to n * 2^-1074 (ties to even).
  function unscaled(n) {
    const negative = n < 0n;
    let magnitude = negative ? -n : n;
    let shift = bigintToString(magnitude, 2).length - 53;
    if (shift > 0) {
      const rest = magnitude & ((1n << BigIntCtor(shift)) - 1n);
      const half = 1n << BigIntCtor(shift - 1);
      magnitude >>= BigIntCtor(shift);
      if (rest > half || (rest === half && (magnitude & 1n) === 1n)) magnitude += 1n;
    } else {
      shift = 0;
    }
    // magnitude <= 2^53 and the scale 2^(shift - 1074) is applied in two representable
    // halves: the first product is exact, the second only overflows if the sum does.
    const exponent = shift - 1074;
    const first = mathTrunc(exponent / 2);
    const value = NumberCtor(magnitude) * 2 ** first * 2 ** (exponent - first);
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
    const iterator = call(method, items);
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
  function concat(...items) {
    const sources = [];
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (item === null || (typeof item !== "object" && typeof item !== "function")) {
        throw builtinError("Iterator.concat called on non-object", concat, "Iterator.concat");
      }
      const method = item[iteratorSymbol];
      if (method === undefined) {
        throw builtinError(`${describe(item)} is not iterable`, concat, "Iterator.concat");
      }
      append(sources, { [iteratorSymbol]: () => call(method, item) });
    }
    // flatMap makes the same kind of object the real one returns: an Iterator Helper. It is
    // fed by an iterator of our own (an array's would look `next` up on a shared prototype).
    let next = 0;
    const feed = {
      __proto__: null, // its `return` is not looked up on Object.prototype
      next: () =>
        next < sources.length
          ? { value: sources[next++], done: false }
          : { value: undefined, done: true },
    };
    return call(flatMap, feed, (source) => source);
  }
  installBuiltin(Iterator, "concat", builtin(concat, "concat", 0));

  // ------------------------------------------------------------------ Python channel

  function send(text, kind) {
    let at = 0;
    const length = text.length;
    do {
      const n = mathMin(UNITS, length - at);
      for (let i = 0; i < n; i++) units[i] = charCodeAt(text, at + i);
      at += n;
      header[0] = n;
      header[1] = at < length ? kind | MORE : kind;
      native();
    } while (at < length);
  }
  function readChunk() {
    const n = mathMin(header[0], UNITS);
    let out = "";
    for (let i = 0; i < n; i += 8192) {
      const count = mathMin(8192, n - i);
      const view = new Uint16ArrayCtor(channel, 8 + 2 * i, count);
      // Its own length, so that apply() does not read the getter of %TypedArray%.prototype.
      defineProperty(view, "length", { __proto__: null, value: count });
      out += reflectApply(fromCharCode, undefined, view);
    }
    return out;
  }
  // `message` is JSON text for Python (see v8.py), built by the functions below.
  function post(message) {
    send(message, 0);
  }
  // JSON of a string or number: the only values ever given to stringify for a message.
  function q(value) {
    return stringify(value);
  }
  // Sends `request` and returns Python's answer, which may also come in chunks. An answer
  // starts with a tag: "o" (done), "m" (no value), "v" + JSON (a value), "e" + text (thrown).
  function request(text) {
    send(text, SYNC);
    let answer = readChunk();
    while (header[1] & MORE) {
      header[0] = 0;
      header[1] = SYNC; // the next chunk of the answer
      native();
      answer += readChunk();
    }
    return answer;
  }

  // ------------------------------------------------------------------ errors

  const EXIT = { exit: true };

  // The body shares line 1 with the wrapper Python puts before it (see v8.py): its length.
  let wrapperLength = 0;
  const PRELUDE_FILE = "codemode_prelude.js";
  const FRAME = "    at ";
  const LINE_ONE = "exec_main.mjs:1:";

  // A V8 stack as the reference host shows it: without this prelude's frames (a line after
  // the first that starts with FRAME and names this file), and with the positions on line 1
  // those of the body itself. String functions only: a RegExp would call the cell's exec().
  function hostStack(stack) {
    let kept = "";
    let start = 0;
    for (;;) {
      const end = stringIndexOf(stack, "\n", start);
      const line = stringSlice(stack, start, end < 0 ? stack.length : end);
      const frame = start > 0 && startsWith(line, FRAME);
      if (!(frame && stringIndexOf(line, PRELUDE_FILE) >= 0)) {
        kept += (start > 0 ? "\n" : "") + line;
      }
      if (end < 0) break;
      start = end + 1;
    }
    let out = "";
    let at = 0;
    for (;;) {
      const found = stringIndexOf(kept, LINE_ONE, at);
      if (found < 0) break;
      let digits = found + LINE_ONE.length;
      while (digits < kept.length) {
        const unit = charCodeAt(kept, digits);
        if (unit < 48 || unit > 57) break;
        digits++;
      }
      const numberStart = found + LINE_ONE.length;
      if (digits === numberStart) {
        out += stringSlice(kept, at, numberStart);
      } else {
        const column = NumberCtor(stringSlice(kept, numberStart, digits)) - wrapperLength;
        out += `${stringSlice(kept, at, numberStart)}${column > 1 ? column : 1}`;
      }
      at = digits;
    }
    return out + stringSlice(kept, at);
  }

  // The text the reference host reports for a thrown value: an error's stack, or the value
  // itself as a string (a thrown string verbatim).
  function errorText(value) {
    try {
      if (value !== null && (typeof value === "object" || typeof value === "function")) {
        const stack = value.stack;
        if (typeof stack === "string") return hostStack(stack);
      }
      return StringCtor(value);
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
      const unit = charCodeAt(text, i);
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
      const unit = charCodeAt(json, i);
      if (unit === 34) {
        // A string, to its closing quote: one not escaped by an odd run of backslashes.
        for (;;) {
          i = stringIndexOf(json, '"', i + 1);
          if (i < 0) return undefined;
          let before = i - 1;
          while (charCodeAt(json, before) === 92) before--;
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
    const bound = bind(impl, undefined);
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
        return StringCtor(value);
    }
  }

  // The messages of an output item (see v8.py's _content_item).
  function emitText(value) {
    post(`["emit",{"type":"input_text","text":${q(value)}}]`);
  }
  function emitImage(url, detail) {
    post(`["emit",{"type":"input_image","image_url":${q(url)},"detail":${q(detail)}}]`);
  }
  function emitAudio(url) {
    post(`["emit",{"type":"input_audio","audio_url":${q(url)}}]`);
  }
  function emit(item) {
    if (item.type === "input_text") emitText(item.text);
    else if (item.type === "input_image") emitImage(item.image_url, item.detail);
    else emitAudio(item.audio_url);
  }

  function text(...args) {
    emitText(textOf(arg(args, 0), text));
  }

  const IMAGE_USAGE =
    "image expects a non-empty image URL string, an object with image_url and optional detail, or a raw MCP image block";
  const AUDIO_USAGE =
    "audio expects a non-empty audio URL string, an object with audio_url, or a raw MCP audio block";

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
    return toLowerCase(stringSlice(url, 0, 5)) === "data:";
  }
  // What /^https?:/i matches.
  function isRemote(url) {
    const head = toLowerCase(stringSlice(url, 0, 6));
    return startsWith(head, "http:") || startsWith(head, "https:");
  }
  function imageDetail(detail) {
    if (detail === undefined || detail === null) return "high";
    if (typeof detail !== "string") throw "image detail must be a string when provided";
    const lower = toLowerCase(detail);
    if (lower !== "auto" && lower !== "low" && lower !== "high" && lower !== "original") {
      throw "image detail must be one of: auto, low, high, original";
    }
    return lower;
  }
  // An MCP image block asks for a detail with _meta["codex/imageDetail"]: one of the four
  // names exactly, anything else is no request.
  function metaDetail(block) {
    const meta = block._meta;
    const detail = isObject(meta) ? meta["codex/imageDetail"] : undefined;
    const known = detail === "auto" || detail === "low" || detail === "high";
    return known || detail === "original" ? detail : undefined;
  }
  // image(url | {image_url, detail?} | MCP block, detail?): the second argument wins over
  // an object's detail; an MCP block's own detail is ignored, its _meta detail is not.
  function imageItem(value, detail) {
    let url;
    if (typeof value === "string") {
      url = value;
    } else if (isObject(value) && value.type === "image") {
      url = dataUri(value, "image");
      detail = detail ?? metaDetail(value);
    } else if (isObject(value) && "image_url" in value) {
      url = value.image_url;
      detail = detail ?? value.detail;
    } else if (isObject(value) && typeof value.type === "string") {
      throw `image only accepts MCP image blocks, got ${q(value.type)}`;
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
      throw `audio only accepts MCP audio blocks, got ${q(value.type)}`;
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
    emit(imageItem(arg(args, 0), arg(args, 1)));
  }
  function audio(...args) {
    emit(audioItem(arg(args, 0)));
  }
  function generatedImage(...args) {
    const value = arg(args, 0);
    if (!isObject(value)) throw "generatedImage expects an image generation result object";
    emit(imageItem(value, undefined));
  }

  const CONTENT_USAGE = "content expects one MCP ContentBlock";
  function contentItem(block) {
    if (!isObject(block)) throw CONTENT_USAGE;
    if (block.type === "text") {
      if (typeof block.text !== "string") throw CONTENT_USAGE;
      return { type: "input_text", text: block.text };
    }
    // An MCP block as it is: its data unchecked, a detail only from its _meta.
    if (block.type === "image" && typeof block.data === "string") {
      return { type: "input_image", image_url: blockUri(block), detail: metaDetail(block) ?? "high" };
    }
    if (block.type === "audio" && typeof block.data === "string") {
      return { type: "input_audio", audio_url: blockUri(block) };
    }
    throw CONTENT_USAGE;
  }
  function content(...args) {
    const value = arg(args, 0);
    if (isObject(value) && typeof value.type !== "string" && typeof value[iteratorSymbol] === "function") {
      // Each block is emitted as it is read: a bad one fails the call after the good ones.
      for (const block of value) emit(contentItem(block));
      return;
    }
    emit(contentItem(value));
  }

  // ------------------------------------------------------------------ control

  function notify(...args) {
    // Converted as text() converts; blank text is refused.
    const message = textOf(arg(args, 0), notify);
    if (stringTrim(message) === "") throw "notify expects non-empty text";
    // Synchronous, so that a refusal (too many pending delegate calls) is thrown here; the
    // delivery itself is not waited for.
    const answer = request(`["notify",${q(message)}]`);
    if (startsWith(answer, "e")) throw stringSlice(answer, 1);
  }
  function yield_control() {
    post('["yield"]');
  }
  function exit() {
    post('["exit"]');
    throw EXIT;
  }

  // ------------------------------------------------------------------ store

  function storeKey(key, what) {
    if (typeof key === "symbol") throw `${what} key must be a string`;
    return StringCtor(key);
  }
  function store(...args) {
    const key = storeKey(arg(args, 0), "store");
    const value = arg(args, 1);
    if (value === undefined) {
      throw `Unable to store ${q(key)}. Only plain serializable objects can be stored.`;
    }
    post(`["store",${q(key)},${q(toJson(value, store))}]`);
  }
  function load(...args) {
    const answer = request(`["load",${q(storeKey(arg(args, 0), "load"))}]`);
    if (startsWith(answer, "e")) throw stringSlice(answer, 1);
    return startsWith(answer, "v") ? parse(stringSlice(answer, 1)) : undefined;
  }

  // ------------------------------------------------------------------ timers

  const timers = new MapCtor();
  let lastTimer = 0;
  function setTimeout(...args) {
    const callback = arg(args, 0);
    if (typeof callback !== "function") throw "setTimeout expects a function callback";
    // ToNumber (a BigInt or a Symbol throws, as from a native function: no frame of ours);
    // NaN, an infinity or a negative delay is none.
    const given = arg(args, 1);
    const kind = typeof given;
    if (kind === "bigint" || kind === "symbol") {
      const error = new TypeError(`Cannot convert a ${kind === "bigint" ? "BigInt" : "Symbol"} value to a number`);
      captureStackTrace(error, setTimeout);
      throw error;
    }
    const delay = +given;
    const id = ++lastTimer;
    mapSet(timers, id, callback);
    // Sent to Python in one message per batch, from a promise job queued by the first: a
    // script setting many timers in a loop costs one crossing, not one per timer. No timer
    // can fire before the script yields anyway; the time it ran on is taken off each delay.
    if (newTimers.length === 0) then(resolved(), flushTimers);
    append(newTimers, id);
    append(newTimers, delay > 0 && delay < Infinity ? delay : 0);
    append(newTimers, dateNow());
    return id;
  }
  let newTimers = [];
  function flushTimers() {
    const batch = newTimers;
    newTimers = [];
    const now = dateNow();
    let pairs = "";
    for (let i = 0; i < batch.length; i += 3) {
      const left = batch[i + 1] - (now - batch[i + 2]);
      pairs += `${i ? "," : ""}${q(batch[i])},${q(left > 0 ? left : 0)}`;
    }
    post(`["timers",[${pairs}]]`);
  }
  function clearTimeout(...args) {
    mapDelete(timers, arg(args, 0));
  }
  function fire(id) {
    const callback = mapGet(timers, id);
    if (callback !== undefined && !finished) {
      mapDelete(timers, id);
      // From a promise job, as start() does; a throw fails the cell.
      then(then(resolved(), callback), undefined, finish);
    }
  }

  // ------------------------------------------------------------------ settled helpers

  function settledEntries(promises) {
    const keyed = hasInstance(MapCtor, promises);
    const entries = [];
    let position = 0;
    for (const entry of promises) {
      append(entries, keyed ? [entry[0], entry[1]] : [position++, entry]);
    }
    return entries;
  }
  // Calls `deliver` with the settled result two jobs after `promise` settles. The handlers are
  // registered by the captured then(), so the cell's promise never sees them.
  function settleOne(index, promise, deliver) {
    const later = (result) => then(resolved(), () => deliver(result));
    promiseThen(
      promiseResolve(promise),
      (value) => later({ index, status: "fulfilled", value }),
      (reason) => later({ index, status: "rejected", reason }),
    );
  }
  // Yields {index, status, value | reason} for each promise, in the order they settle. The
  // promises are taken at the call (a non-iterable throws there), as the reference host does.
  function as_settled(promises) {
    const entries = settledEntries(promises);
    const ready = [];
    let wakeUp;
    const deliver = (result) => {
      append(ready, result);
      if (wakeUp !== undefined) {
        const resume = wakeUp;
        wakeUp = undefined;
        resume();
      }
    };
    for (let i = 0; i < entries.length; i++) settleOne(entries[i][0], entries[i][1], deliver);
    return (async function* settled() {
      for (let delivered = 0; delivered < entries.length; delivered++) {
        if (ready.length === 0) {
          // Awaited as it is: its own constructor is %Promise%, so await takes it directly.
          await own(new PromiseCtor((resolve) => (wakeUp = resolve)), PromiseCtor);
        }
        yield arrayShift(ready);
      }
    })();
  }
  // Calls `callback(result)` for each promise as it settles; resolves when all have.
  async function stream_settled(promises, callback) {
    if (typeof callback !== "function") throw new TypeErrorCtor("stream_settled requires a callback");
    const results = as_settled(promises);
    for (;;) {
      const step = await own(asyncGeneratorNext(results), PromiseCtor);
      if (step.done) break;
      await callback(step.value);
    }
  }

  // ------------------------------------------------------------------ tools

  const calls = new MapCtor();
  let lastCall = 0;
  function bindTool(binding) {
    function tool(...args) {
      const input = arg(args, 0) === undefined ? "null" : toJson(args[0], tool);
      const id = ++lastCall;
      post(`["call",${q(id)},${q(binding)},${q(input)}]`);
      return new PromiseCtor((resolve, reject) => mapSet(calls, id, { resolve, reject }));
    }
    return hostFunction(tool);
  }
  function settle(id, ok, payload) {
    const pending = mapGet(calls, id);
    if (pending !== undefined) {
      mapDelete(calls, id);
      if (ok) pending.resolve(parse(payload));
      else pending.reject(payload);
    }
  }

  // ------------------------------------------------------------------ import

  // What import(...) and import.meta of the script became (see dynamic_import.py). The
  // reference host's loader refuses every module with a string, once V8 has converted the
  // specifier and checked the options as import() does, each failure a rejection.
  const IMPORT_REFUSED = "unsupported import in exec";
  function importError(message) {
    const error = new TypeErrorCtor(message);
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
    const keys = objectKeys(attributes);
    for (let i = 0; i < keys.length; i++) {
      if (typeof attributes[keys[i]] !== "string") {
        return importError("Import attribute value must be a string");
      }
    }
    return undefined;
  }
  function dynamicImport(specifier, options) {
    try {
      if (typeof specifier === "symbol") {
        return promiseReject(importError("Cannot convert a Symbol value to a string"));
      }
      `${specifier}`; // ToString, which may run the script's own toString()
      const error = importOptionsError(options);
      return promiseReject(error === undefined ? IMPORT_REFUSED : error);
    } catch (error) {
      return promiseReject(error);
    }
  }
  // import.meta: one object per cell (a module), empty and without a prototype.
  defineProperty(dynamicImport, "meta", { value: objectCreate(null) });

  // ------------------------------------------------------------------ the cell

  let finished = false;
  function succeed() {
    if (finished) return;
    finished = true;
    post('["done"]');
  }
  function finish(error) {
    if (finished) return;
    finished = true;
    if (error === EXIT) return; // exit() already queued its message
    post(`["error",${q(errorText(error))}]`);
  }

  // Called by run(), before any of the cell's code exists: the built-ins it uses are intact.
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
  // traces hold the script's frames only. Its promise is never handed to anything that
  // would call its then(): one job after the body returns, the captured then() follows it,
  // so that succeed or finish runs exactly when `resolve().then(body).then(succeed, finish)`
  // would run them.
  function start(wrapper) {
    if (finished) return; // run() already failed the cell
    const body = wrapper(dynamicImport);
    then(resolved(), () => {
      let promise;
      try {
        promise = own(body(undefined), undefined); // the argument then() would pass
      } catch (error) {
        finish(error);
        return;
      }
      then(resolved(), () => {
        try {
          then(then(promise), succeed, finish);
        } catch (error) {
          finish(error);
        }
      });
    });
  }

  // Compiles (without running) the body with its import() calls as written (and import.meta
  // as a value that cannot be assigned), for the syntax errors V8 finds there as in a module:
  // `import()`, `new import(x)`, three arguments, `import.meta = 1`...
  function checkImports(checkSource) {
    try {
      indirectEval(`"use strict";(async function () {\n${checkSource}\n})`);
    } catch (error) {
      if (!hasInstance(SyntaxErrorCtor, error)) throw error;
      finished = true;
      post(`["syntax",${q(StringCtor(error))}]`);
    }
  }

  // The reference host compiles the cell as a module, where a top-level `return` is a
  // SyntaxError. Here the body is a function's, so that case is found by compiling the
  // source (without running it) as a class static block, where `return` is illegal too.
  // (Called by run(), before any of the cell's code exists: the RegExp is still intact.)
  function hasTopLevelReturn(source) {
    if (!/\breturn\b/.test(source)) return false;
    try {
      indirectEval(`(function () { class C { static {\n${source}\n} } })`);
    } catch (error) {
      return hasInstance(SyntaxErrorCtor, error) && error.message === "Illegal return statement";
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

  // Python's way in: `this` is the cell's wrapper (start), or a JSON array naming what to do.
  let started = false;
  function dispatch() {
    const subject = this;
    if (typeof subject === "function") {
      if (!started) {
        started = true;
        start(subject);
      }
      return;
    }
    const message = parse(subject);
    const what = message[0];
    if (what === "settle") settle(message[1], message[2], message[3]);
    else if (what === "fire") fire(message[1]);
    else if (what === "run") run(message[1], message[2], message[3], message[4]);
  }

  return [dispatch, channel];
});
