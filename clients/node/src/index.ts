export * from './elector';
export { parsePayload, Payload } from './payload';
