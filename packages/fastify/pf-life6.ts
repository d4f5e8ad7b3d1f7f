import Fastify from 'fastify';
import { sleep, log } from './pf-lib.ts';
const app = Fastify();
const order: string[] = [];
app.addHook('onReady', async () => { order.push('ready-start'); await sleep(300); order.push('ready-end'); });
app.addHook('onClose', async () => { order.push('close-start'); await sleep(10); order.push('close-end'); });
const res = await Promise.allSettled([app.ready(), app.close()]);
log('baseline same tick', res.map((x) => x.status).join(','), order.join(' > '));
