// Form fields generated from a tool's input schema (a JSON Schema object), for trying a tool
// from the console. Scalars get matching inputs (enum → select, date/date-time/email/uri →
// those input types, numbers with min/max/step, booleans as checkboxes), arrays of scalars a
// text area with one item per line, and anything else (nested objects, arrays of objects,
// unions, untyped values) a JSON text area of its own. Required fields are marked and enforced;
// defaults fill the fields and descriptions are shown.

import { h } from "./dom.js";

/** A field whose text cannot be read as its type; `input` is the element to mark. */
export class FieldError extends Error {
  constructor(input, label, message) {
    super(`${label}: ${message}`);
    this.input = input;
    this.label = label;
  }
}

const STRING_FORMATS = { date: "date", "date-time": "datetime-local", email: "email", uri: "url", url: "url", "uri-reference": "text" };

/** The one type a schema names, ignoring `null` (`["string", "null"]` is a string). */
function typeOf(schema) {
  if (!schema || typeof schema !== "object") return null;
  let type = schema.type;
  if (Array.isArray(type)) {
    const named = type.filter((t) => t !== "null");
    type = named.length === 1 ? named[0] : null;
  }
  if (!type && Array.isArray(schema.enum) && schema.enum.length && schema.enum.every((v) => typeof v === "string")) return "string";
  if (!type && "const" in schema && typeof schema.const === "string") return "string";
  return type || null;
}

function enumOf(schema) {
  if (Array.isArray(schema.enum) && schema.enum.length) return schema.enum;
  if (schema && "const" in schema) return [schema.const];
  return null;
}

function isScalarType(type) {
  return type === "string" || type === "number" || type === "integer" || type === "boolean";
}

/** Which kind of field a property gets. */
export function fieldKind(schema) {
  const type = typeOf(schema);
  const choices = enumOf(schema || {});
  if (choices && !choices.every((v) => typeof v === "string")) return "json";
  if (type === "string") return choices ? "enum" : "string";
  if (type === "number" || type === "integer") return "number";
  if (type === "boolean") return "boolean";
  if (type === "array" && schema.items && !Array.isArray(schema.items)) {
    const itemType = typeOf(schema.items);
    const itemChoices = enumOf(schema.items);
    if (itemType === "string" && itemChoices && itemChoices.every((v) => typeof v === "string")) return "multi";
    if (isScalarType(itemType) && !itemChoices) return "lines";
  }
  return "json";
}

/** A short text saying what a field takes: "integer, 0 to 10", "one string per line". */
function describeType(schema, kind) {
  const type = typeOf(schema);
  const parts = [];
  switch (kind) {
    case "string":
      parts.push(schema.format ? `string (${schema.format})` : "string");
      if (schema.format === "date-time") parts.push("your local time, sent as UTC");
      if (schema.minLength !== undefined || schema.maxLength !== undefined) parts.push(range("characters", schema.minLength, schema.maxLength));
      if (schema.pattern) parts.push(`matching ${schema.pattern}`);
      break;
    case "enum":
      parts.push("one of the listed values");
      break;
    case "number":
      parts.push(type);
      if (schema.minimum !== undefined || schema.maximum !== undefined) parts.push(range("", schema.minimum, schema.maximum));
      if (schema.exclusiveMinimum !== undefined) parts.push(`more than ${schema.exclusiveMinimum}`);
      if (schema.exclusiveMaximum !== undefined) parts.push(`less than ${schema.exclusiveMaximum}`);
      if (schema.multipleOf !== undefined) parts.push(`a multiple of ${schema.multipleOf}`);
      break;
    case "boolean":
      parts.push("checked: true, unchecked: false");
      break;
    case "multi":
      parts.push("any of the listed values");
      break;
    case "lines":
      parts.push(`a list: one ${typeOf(schema.items)} per line`);
      break;
    default:
      parts.push(type ? `${type}, as JSON` : "any JSON value");
  }
  return parts.filter(Boolean).join(", ");
}

function range(unit, min, max) {
  const suffix = unit ? ` ${unit}` : "";
  if (min !== undefined && max !== undefined) return `${min} to ${max}${suffix}`;
  if (min !== undefined) return `at least ${min}${min === 1 && unit === "characters" ? " character" : suffix}`;
  return `at most ${max}${suffix}`;
}

/** `2026-11-25T21:00:00.000Z` → `2026-11-25T22:00:00` in this browser's zone, for datetime-local. */
function localDateTime(iso) {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return null;
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/** An example of a value of `schema`, for a JSON field's placeholder. */
function example(schema, depth = 0) {
  const type = typeOf(schema);
  if (schema && schema.default !== undefined) return schema.default;
  if (depth > 2) return null;
  switch (type) {
    case "object": {
      const out = {};
      for (const [key, sub] of Object.entries((schema && schema.properties) || {}).slice(0, 6)) out[key] = example(sub, depth + 1);
      return out;
    }
    case "array":
      return schema.items && !Array.isArray(schema.items) ? [example(schema.items, depth + 1)] : [];
    case "string":
      return enumOf(schema)?.[0] ?? "";
    case "number":
    case "integer":
      return schema.minimum ?? 0;
    case "boolean":
      return false;
    default:
      return null;
  }
}

let forms = 0;

/**
 * Builds the fields for `schema` (`{"type": "object", "properties": …, "required": […]}`).
 * Returns `{element, fieldCount, read(), write(values)}`:
 * - `read({strict})` gives the arguments object; with `strict` (submitting) a field that cannot
 *   be read throws a `FieldError` (the caller marks it), without it (switching to raw JSON) such
 *   a field's raw text is skipped.
 * - `write(values)` fills the fields from an arguments object and returns the names it could
 *   not show in a field (the caller keeps the raw JSON then). Keys the schema does not list are
 *   kept and sent as they are.
 */
export function schemaForm(schema, { idPrefix } = {}) {
  const prefix = idPrefix || `field-${++forms}`;
  const properties = (schema && typeof schema.properties === "object" && schema.properties) || {};
  const required = new Set(Array.isArray(schema && schema.required) ? schema.required : []);
  const fields = Object.entries(properties).map(([name, sub], index) =>
    buildField(name, sub && typeof sub === "object" ? sub : {}, required.has(name), `${prefix}-${index}`),
  );
  let extras = {};
  const extrasNote = h("p", { class: "sv-extras muted", hidden: true });
  const element = h("div", { class: "sv-fields" }, fields.map((field) => field.element), extrasNote);

  function showExtras() {
    const keys = Object.keys(extras);
    extrasNote.hidden = keys.length === 0;
    extrasNote.textContent = keys.length
      ? `Also sent, as given in the raw JSON (not in the input schema): ${keys.join(", ")}.`
      : "";
  }

  return {
    element,
    fieldCount: fields.length,
    read({ strict = true } = {}) {
      const out = {};
      for (const field of fields) {
        try {
          const value = field.read();
          if (value !== undefined) out[field.name] = value;
        } catch (error) {
          if (strict) throw error;
        }
      }
      return { ...extras, ...out };
    },
    write(values) {
      const refused = [];
      for (const field of fields) {
        if (!field.canShow(values[field.name])) refused.push(field.name);
      }
      if (refused.length) return refused;
      for (const field of fields) field.write(values[field.name]);
      extras = Object.fromEntries(Object.entries(values).filter(([key]) => !(key in properties)));
      showExtras();
      return [];
    },
    /** Clears the custom validity messages set by a failed read. */
    clearErrors() {
      for (const field of fields) field.input.setCustomValidity?.("");
    },
  };
}

function buildField(name, schema, isRequired, id) {
  const kind = fieldKind(schema);
  const hintId = `${id}-hint`;
  const hasDefault = schema.default !== undefined;
  const hints = [];
  if (schema.title && schema.title !== name) hints.push(h("strong", {}, schema.title), ". ");
  if (schema.description) hints.push(schema.description, " ");
  hints.push(h("span", { class: "sv-type" }, `(${describeType(schema, kind)}${hasDefault ? `; default ${JSON.stringify(schema.default)}` : ""})`));
  const hint = h("p", { id: hintId, class: "sv-hint muted" }, hints);
  // The mark sits beside the label, so the field's name is its accessible name; screen readers
  // learn it is required from the `required` attribute.
  const mark = () => (isRequired ? h("span", { class: "sv-required", "aria-hidden": "true" }, "*") : null);
  const common = { id, name, "aria-describedby": hintId, "data-field": name };
  let input;
  let read;
  let write;
  let canShow = () => true;
  let label;

  switch (kind) {
    case "string": {
      const type = STRING_FORMATS[schema.format] || "text";
      input = h("input", {
        ...common,
        type,
        required: isRequired,
        minlength: schema.minLength,
        maxlength: schema.maxLength,
        step: type === "datetime-local" ? 1 : null,
        autocomplete: "off",
        spellcheck: "false",
      });
      read = () => {
        const value = input.value;
        if (value === "") return undefined;
        if (type === "datetime-local") {
          const date = new Date(value);
          if (Number.isNaN(date.getTime())) throw new FieldError(input, name, "not a date and time");
          return date.toISOString();
        }
        return value;
      };
      canShow = (value) => value === undefined || value === null || typeof value === "string" || typeof value === "number";
      write = (value) => {
        if (value === undefined || value === null) input.value = "";
        else if (type === "datetime-local") input.value = localDateTime(value) ?? "";
        else input.value = String(value);
      };
      if (type === "datetime-local") canShow = (value) => value === undefined || value === null || (typeof value === "string" && localDateTime(value) !== null);
      if (type === "date") canShow = (value) => value === undefined || value === null || (typeof value === "string" && /^\d{4}-\d{2}-\d{2}$/.test(value));
      break;
    }
    case "enum": {
      const choices = enumOf(schema);
      const blank = !isRequired || !hasDefault ? h("option", { value: "" }, isRequired ? "— choose —" : "— not set —") : null;
      input = h("select", { ...common, required: isRequired }, blank, choices.map((choice) => h("option", { value: choice }, choice)));
      read = () => (input.value === "" ? undefined : input.value);
      canShow = (value) => value === undefined || value === null || choices.includes(value);
      write = (value) => (input.value = value === undefined || value === null ? "" : value);
      break;
    }
    case "number": {
      const integer = typeOf(schema) === "integer";
      input = h("input", {
        ...common,
        type: "number",
        required: isRequired,
        min: schema.minimum,
        max: schema.maximum,
        step: schema.multipleOf ?? (integer ? 1 : "any"),
        inputmode: integer ? "numeric" : "decimal",
      });
      read = () => {
        if (input.value === "") return undefined;
        const value = Number(input.value);
        if (!Number.isFinite(value)) throw new FieldError(input, name, "not a number");
        if (integer && !Number.isInteger(value)) throw new FieldError(input, name, "must be a whole number");
        return value;
      };
      canShow = (value) => value === undefined || value === null || typeof value === "number";
      write = (value) => (input.value = value === undefined || value === null ? "" : String(value));
      break;
    }
    case "boolean": {
      input = h("input", { ...common, type: "checkbox" });
      read = () => input.checked;
      canShow = (value) => value === undefined || value === null || typeof value === "boolean";
      write = (value) => (input.checked = value === true);
      label = h("div", { class: "sv-label-row" }, h("label", { class: "inline sv-check", for: id }, input, h("span", {}, name)), mark());
      break;
    }
    case "multi": {
      const choices = enumOf(schema.items);
      const boxes = choices.map((choice, index) => h("input", { type: "checkbox", id: `${id}-${index}`, value: choice, "data-field": name }));
      input = h(
        "fieldset",
        { id, class: "sv-multi", "aria-describedby": hintId },
        h("legend", {}, name, isRequired ? h("span", { class: "sv-required", "aria-hidden": "true" }, " *") : null),
        boxes.map((box) => h("label", { class: "inline", for: box.id }, box, box.value)),
      );
      input.setCustomValidity = (message) => boxes[0]?.setCustomValidity(message);
      read = () => {
        const chosen = boxes.filter((box) => box.checked).map((box) => box.value);
        if (chosen.length === 0 && !isRequired) return undefined;
        if (chosen.length === 0 && boxes[0]) {
          boxes[0].setCustomValidity("choose at least one");
          throw new FieldError(boxes[0], name, "choose at least one value");
        }
        return chosen;
      };
      canShow = (value) => value === undefined || value === null || (Array.isArray(value) && value.every((v) => choices.includes(v)));
      write = (value) => boxes.forEach((box) => (box.checked = Array.isArray(value) && value.includes(box.value)));
      boxes.forEach((box) => box.addEventListener("change", () => boxes[0].setCustomValidity("")));
      label = input;
      break;
    }
    case "lines": {
      const itemType = typeOf(schema.items);
      input = h("textarea", { ...common, required: isRequired, rows: 3, spellcheck: "false", class: "sv-lines" });
      read = () => {
        const lines = input.value.split("\n").map((line) => line.trim()).filter((line) => line !== "");
        if (lines.length === 0) return input.value.trim() === "" && !isRequired ? undefined : [];
        return lines.map((line, index) => {
          if (itemType === "string") return line;
          if (itemType === "boolean") {
            if (line === "true" || line === "false") return line === "true";
            throw new FieldError(input, name, `line ${index + 1} is not true or false`);
          }
          const value = Number(line);
          if (line === "" || !Number.isFinite(value)) throw new FieldError(input, name, `line ${index + 1} is not a number`);
          if (itemType === "integer" && !Number.isInteger(value)) throw new FieldError(input, name, `line ${index + 1} is not a whole number`);
          return value;
        });
      };
      canShow = (value) =>
        value === undefined ||
        value === null ||
        (Array.isArray(value) && value.every((v) => isScalarType(typeof v === "number" ? "number" : typeof v) && !(typeof v === "string" && v.includes("\n"))));
      write = (value) => (input.value = Array.isArray(value) ? value.map(String).join("\n") : "");
      break;
    }
    default: {
      input = h("textarea", {
        ...common,
        required: isRequired,
        rows: 4,
        spellcheck: "false",
        class: "sv-json",
        placeholder: JSON.stringify(example(schema), null, 2) ?? "",
      });
      read = () => {
        if (input.value.trim() === "") return undefined;
        try {
          return JSON.parse(input.value);
        } catch (error) {
          throw new FieldError(input, name, `not valid JSON (${error.message})`);
        }
      };
      write = (value) => (input.value = value === undefined ? "" : JSON.stringify(value, null, 2));
    }
  }

  if (hasDefault) {
    if (canShow(schema.default)) write(schema.default);
  } else if (kind === "boolean") {
    input.checked = false;
  }
  input.addEventListener("input", () => input.setCustomValidity?.(""));

  const element = h(
    "div",
    { class: `sv-field sv-field-${kind}` },
    label || h("div", { class: "sv-label-row" }, h("label", { for: id }, name), mark()),
    label ? null : input,
    hint,
  );
  return { name, element, input, read, write, canShow };
}
