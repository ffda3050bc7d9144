/**
 * A promise with a deadline: the one place that races work against a timer, so every wait in
 * Nova has one without a timer left behind.
 */

/** `work`, or the error `late()` makes if it has not settled within `ms`. */
export function withDeadline<T>(work: Promise<T>, ms: number, late: () => Error): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(late()), Math.max(0, ms));
  });
  return Promise.race([work, expired]).finally(() => clearTimeout(timer));
}
