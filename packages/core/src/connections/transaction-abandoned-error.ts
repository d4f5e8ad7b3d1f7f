// Kept where the connections code imports it from; the class lives with the other errors.
export { TransactionAbandonedError } from '../errors.js';
