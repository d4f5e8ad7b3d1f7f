/** The transaction's connection was lost, or the transaction was ended: nothing of it may run any more. */
export class TransactionAbandonedError extends Error {
  constructor() {
    super("the transaction's connection was lost; the rest of the transaction is abandoned");
    this.name = 'TransactionAbandonedError';
  }
}
