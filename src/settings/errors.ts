/**
 * The one error type of settings loading. Its message is a single line that names the variable,
 * the bad value and what is accepted, e.g.
 * `invalid value "maybe" for USE_STATSD: expected a boolean (true, false, 1, 0, t, f)`,
 * so the start-up failure can be printed as is.
 */
export class SettingsError extends Error {
  override readonly name = 'SettingsError';
  /** The environment variable at fault (as the user spelled it, alias or not), when there is one. */
  readonly variable: string | undefined;

  constructor(message: string, variable?: string) {
    super(message.replace(/[\r\n]+/g, ' '));
    this.variable = variable;
  }
}

/** `invalid value "<value>" for <VAR>: <expected>` (the value is JSON-quoted so it stays on one line). */
export function invalidValue(variable: string, value: string, expected: string): SettingsError {
  return new SettingsError(`invalid value ${JSON.stringify(value)} for ${variable}: ${expected}`, variable);
}
