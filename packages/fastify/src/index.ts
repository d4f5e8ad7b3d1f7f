import fp from 'fastify-plugin';
import { sluicePlugin } from './plugin.js';
import './type-augmentation.js';

/** The Sluice Fastify plugin: `app.register(sluice, { sql, consumers, ops })`. */
const sluice = fp(sluicePlugin, { name: '@sluice/fastify', fastify: '5.x' });

export default sluice;
export { sluice };
export { basicAuth, bearerAuth } from './bearer-auth.js';
export { STATUS_BY_CODE } from './http-errors.js';

export type { OpsAuth } from './bearer-auth.js';
export type { OpsOptions, RedactInput, SluicePluginOptions } from './options.js';
export type { SluiceDecorator } from './type-augmentation.js';
