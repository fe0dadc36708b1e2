/** No bytes: one shared empty Buffer (it cannot be written to), for "nothing held" states. */
export const EMPTY_BUFFER: Buffer = Buffer.alloc(0);
